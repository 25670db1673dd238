"""``grpo-run check`` measures every prompt with the model's tokenizer: a prompt training would
leave out is named by its file and line, and a huge row costs no more memory than a short one."""

from __future__ import annotations

import json
import subprocess
import sys

from support.processes import subprocess_env
from support.runs import write_run

from grpo_run.cli.main import main


def _rows_with_long_prompts(tmp_path, long_lines: dict[int, str]):
    """A run whose train.jsonl has a long prompt at each of ``long_lines`` (1-based)."""
    cfg = write_run(tmp_path, verifier="exact-match", train_rows=8)
    train = tmp_path / "train.jsonl"
    rows = [json.loads(line) for line in train.read_text().splitlines()]
    for line, text in long_lines.items():
        rows[line - 1]["messages"][0]["content"] = text
    train.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return cfg, train


def test_check_names_each_prompt_longer_than_the_limit(tmp_path, capsys):
    cfg, train = _rows_with_long_prompts(tmp_path, {3: "9" * 40, 6: "8" * 17})
    assert main(["check", str(cfg)]) == 0
    out = capsys.readouterr().out
    for line in (3, 6):
        assert (f"warning: {train}:{line}: the prompt is longer than data.max_prompt_token_length = 16 tokens; "
                "training leaves it out") in out
    assert f"{train}:1:" not in out


def test_check_of_a_10_mb_prompt_stays_small(tmp_path):
    cfg, train = _rows_with_long_prompts(tmp_path, {2: "7" * 10_000_000})
    probe = ("import sys; from grpo_run.cli.main import main; from grpo_run.core.memory.budget import resident_peak_bytes; "
             "code = main(sys.argv[1:]); print('PEAK_KB', int(resident_peak_bytes() / 1024)); sys.exit(code)")
    done = subprocess.run([sys.executable, "-c", probe, "check", str(cfg)], capture_output=True, text=True,
                          env=subprocess_env(), timeout=300)
    assert done.returncode == 0, done.stderr
    assert f"warning: {train}:2: the prompt is longer than data.max_prompt_token_length = 16 tokens" in done.stdout
    peak_gb = int(done.stdout.split("PEAK_KB")[1].split()[0]) / 1024**2
    assert peak_gb < 1.5, peak_gb  # tokenising the whole row took 4.4 GB
