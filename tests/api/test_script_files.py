"""``grpo_run.train`` from a plain script file, as users write them: no ``if __name__ ==
"__main__":`` guard. Starting a scoring worker must not run the script again inside the worker
(multiprocessing's ``spawn`` re-runs the parent's main file or module unless told otherwise)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap

from support.paths import DOCS, EXAMPLES

import grpo_run
from grpo_run.core.spawn import main_hidden


def first_python_block(page: str) -> str:
    text = (DOCS / page).read_text(encoding="utf-8")
    start = text.index("```python\n") + len("```python\n")
    return text[start:text.index("```", start)]


def run_python(args: list[str], cwd) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}  # the tested tree, in the child too
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def test_the_python_api_example_runs_as_a_script_file(tmp_path):
    script = first_python_block("python-api.md")
    assert 'grpo_run.train(\n    "examples/arithmetic.toml"' in script and "__main__" not in script
    # The reward function also notes what it was given (it runs in the scoring worker).
    script = script.replace(
        "def correct(completion, ground_truth, **kwargs):     # one completion at a time\n",
        "def correct(completion, ground_truth, **kwargs):     # one completion at a time\n"
        "    open('seen.txt', 'a').write(f'{ground_truth!r} {kwargs[\"row\"][\"ground_truth\"]!r}\\n')\n",
    )
    script += textwrap.dedent("""
        import json
        print("RESULT", json.dumps({"run_dir": str(result.run_dir), "checkpoint": str(result.checkpoint),
                                    "metrics": result.metrics}))
    """)
    (tmp_path / "examples").mkdir()
    shutil.copy(EXAMPLES / "arithmetic.toml", tmp_path / "examples")
    (tmp_path / "train.py").write_text(script, encoding="utf-8")

    proc = run_python(["train.py"], tmp_path)

    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr + proc.stdout
    assert proc.stdout.count("RESULT ") == 1  # the script ran once, not again in a worker
    result = json.loads(proc.stdout.split("RESULT ", 1)[1].splitlines()[0])
    run_dir = tmp_path / result["run_dir"]
    assert result["run_dir"] == "runs/arithmetic"
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    last = metrics[-1]["step"]  # 50, or earlier at the file's stop_at_eval_accuracy
    assert [m["step"] for m in metrics] == list(range(last + 1))  # one run wrote it, none removed it
    for name in ("config.toml", "log.jsonl", f"checkpoints/step_{last}"):
        assert (run_dir / name).exists(), name
    assert result["checkpoint"] == f"runs/arithmetic/checkpoints/step_{last}"
    assert result["metrics"]["verifier/correct/errors"] == 0.0
    # The function got each row's own ground truth (the arithmetic task's answers are strings).
    seen = [line.split(" ") for line in (tmp_path / "seen.txt").read_text().splitlines()]
    assert len(seen) >= last * 128 and all(given == own and given.strip("'").isdigit() for given, own in seen)
    # And the run learnt: greedy answers now match exactly more often than at the start.
    evals = [m["eval/accuracy"] for m in metrics if "eval/accuracy" in m]
    assert evals[-1] > evals[0] + 0.2, evals


def test_a_script_run_as_a_module_is_not_rerun_by_a_worker(tmp_path):
    # `python -m scorer_script`: multiprocessing would re-import it by name as __mp_main__.
    (tmp_path / "scorer_script.py").write_text(textwrap.dedent("""
        import grpo_run
        print("STARTED", flush=True)
        def exact(completion, ground_truth, row):
            return float(completion == ground_truth)
        rows = [{"completion": "4", "ground_truth": "4"}, {"completion": "5", "ground_truth": "4"}]
        print("REWARDS", [r["reward"] for r in grpo_run.score(rows, verifiers={}, reward_funcs=[exact],
                                                        scoring={"num_workers": 1})])
    """), encoding="utf-8")
    proc = run_python(["-m", "scorer_script"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [line for line in proc.stdout.splitlines() if line.startswith(("STARTED", "REWARDS"))]
    assert lines == ["STARTED", "REWARDS [1.0, 0.0]"]
    assert "Traceback" not in proc.stderr


def test_main_is_shown_whole_again_after_a_start():
    main = sys.modules["__main__"]
    before = (main.__dict__.get("__file__"), main.__dict__.get("__spec__"))
    with main_hidden():
        assert "__file__" not in main.__dict__ and main.__spec__ is None
    assert (main.__dict__.get("__file__"), main.__dict__.get("__spec__")) == before
    assert grpo_run  # the public package is what the scripts above import
