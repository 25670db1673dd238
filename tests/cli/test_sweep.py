"""``grpo-run sweep`` as a user runs it: LoRA variants of one config trained at once, each the run
its config makes alone (docs/lora.md): the embedded example's variants match their lone runs, a
variation that may not vary is refused in one line before anything loads, a variant whose
verifier fails stops alone, SIGTERM saves every variant and both the sweep and one variant on its
own resume to the weights of runs never interrupted, and the report compares the variants."""

from __future__ import annotations

import importlib.util
import json
import re
import signal
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from support import faulty_verifiers as faulty
from support.paths import EXAMPLES
from support.processes import metrics_steps, run_grpo
from support.runs import write_rows, write_run
from support.verifiers import LENGTH_REWARD

from grpo_run.cli.main import main

pytest.importorskip("peft", reason="a sweep trains LoRA adapters (pip install 'grpo-run[peft]')")
pytestmark = pytest.mark.timeout(600)

EXAMPLE = str(EXAMPLES / "arithmetic.toml")
QUIET = ["--set", "logging.progress=false", "--set", "train.num_threads=1"]


def metrics(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def variants(sweep: Path) -> dict[str, dict]:
    return {v["name"]: v for v in json.loads((sweep / "sweep.json").read_text())["variants"]}


def test_the_embedded_examples_variants_are_their_lone_runs(tmp_path: Path) -> None:
    # The check of docs/lora.md: LoRA r=8, two learning rates, 3 steps at one thread.
    common = [*QUIET, "--set", "model.lora.r=8", "--set", "train.total_steps=3"]
    sweep = tmp_path / "sweep"
    assert main(["sweep", EXAMPLE, "--vary", "optim.lr=1e-3,3e-3", "--output-dir", str(sweep), *common]) == 0

    found = variants(sweep)
    assert sorted(found) == ["lr-0.001", "lr-0.003"]
    assert all(v["status"] == "completed" and v["step"] == 3 for v in found.values())
    for name, lr in (("lr-0.001", "1e-3"), ("lr-0.003", "3e-3")):
        run = sweep / name
        assert (run / "config.toml").is_file() and (run / "checkpoints" / "step_3" / "adapter_config.json").is_file()
        assert f"lr = {float(lr)}" in (run / "config.toml").read_text()
        lone = tmp_path / f"lone-{lr}"
        assert main([EXAMPLE, "--output-dir", str(lone), "--set", f"optim.lr={lr}", *common]) == 0
        ours, alone = metrics(run), metrics(lone)
        assert [m["step"] for m in ours] == [m["step"] for m in alone] == [0, 1, 2, 3]
        assert ours[1]["reward/mean"] == alone[1]["reward/mean"]
        for a, b in zip(ours[1:], alone[1:]):
            assert abs(a["reward/mean"] - b["reward/mean"]) <= 0.05, (name, a["step"])


@pytest.mark.parametrize(("vary", "line"), [
    ("model.name_or_path=a,b", "error: --vary: model.name_or_path: cannot vary in a sweep: the variants share one "
                               "base model, held once"),
    ("engine.name=hf,vllm", "error: --vary: engine.name: cannot vary in a sweep: the variants share one engine, "
                            "which serves every variant's adapter"),
    ("model.lora.sync=adapter,merged", "error: --vary: model.lora.sync: cannot vary in a sweep: a sweep hands each "
                                       "variant's adapter to the shared engine (sync = \"adapter\")"),
    ("train.num_threads=1,2", "error: --vary: train.num_threads: cannot vary in a sweep: torch's thread count belongs "
                              "to the process the variants share"),
    ("optim.lr", "error: --vary: malformed 'optim.lr': expected KEY=V1,V2[,...], e.g. optim.lr=1e-3,3e-3"),
    ("optim.lr=1e-3,1e-3", "error: --vary: optim.lr: has a value twice (1e-3,1e-3): each variant must differ"),
])
def test_a_variation_the_variants_cannot_have_is_refused_in_one_line(tmp_path, capsys, vary, line) -> None:
    code = main(["sweep", EXAMPLE, "--vary", vary, "--set", "model.lora.r=8", "--output-dir", str(tmp_path / "s")])
    err = capsys.readouterr().err
    assert code == 2 and err.strip() == line
    assert not (tmp_path / "s").exists()  # refused before anything was made


def test_a_value_the_config_refuses_names_the_variation(tmp_path, capsys) -> None:
    code = main(["sweep", EXAMPLE, "--vary", "optim.lr=1e-3,-1", "--set", "model.lora.r=8",
                 "--output-dir", str(tmp_path / "s")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1
    assert err.startswith(f"error: {EXAMPLE}: optim.lr: ") and err.endswith("(from --vary optim.lr=-1)"), err


def test_a_sweep_needs_lora(tmp_path, capsys) -> None:
    code = main(["sweep", EXAMPLE, "--vary", "optim.lr=1e-3,3e-3", "--output-dir", str(tmp_path / "s")])
    assert code == 2
    assert capsys.readouterr().err.strip() == (
        f"error: {EXAMPLE}: model.lora: a sweep trains one LoRA adapter per variant on one base model: "
        "add a [model.lora] table")


@pytest.mark.parametrize(("setting", "line"), [
    ("distributed.backend=ray", "distributed.backend: is 'ray': a sweep holds its variants' adapters in one learner "
                                "process beside one engine (\"local\"); docs/lora.md says how to spread variants over "
                                "machines"),
    ("learner.strategy=ddp", "learner.strategy: is 'ddp' with 1 learner(s): a sweep's variants take turns on one "
                             "learner holding the base model (\"single\")"),
])
def test_a_placement_a_sweep_cannot_spread_over_is_refused_in_one_line(tmp_path, capsys, setting, line) -> None:
    # Scale-out (docs/lora.md): a sweep runs in one process; Ray placement and learner ranks are refused.
    if setting.startswith("distributed.backend") and importlib.util.find_spec("ray") is None:
        pytest.skip("without ray installed the config names the missing extra first")
    code = main(["sweep", EXAMPLE, "--vary", "optim.lr=1e-3,3e-3", "--set", "model.lora.r=8", "--set", setting,
                 "--output-dir", str(tmp_path / "s")])
    assert code == 2 and capsys.readouterr().err.strip() == f"error: {EXAMPLE}: {line}"
    assert not (tmp_path / "s").exists()


def test_a_sweep_on_a_pool_of_engines_samples_as_its_lone_runs(tmp_path) -> None:
    # engine.num_engines = 2: every engine of the pool holds every variant's adapter.
    common = [*QUIET, "--set", "model.lora.r=8", "--set", "train.total_steps=2", "--set", "engine.num_engines=2"]
    sweep = tmp_path / "sweep"
    assert main(["sweep", EXAMPLE, "--vary", "optim.lr=1e-3,3e-3", "--output-dir", str(sweep), *common]) == 0
    assert all(v["status"] == "completed" and v["step"] == 2 for v in variants(sweep).values())
    lone = tmp_path / "lone"
    assert main([EXAMPLE, "--output-dir", str(lone), "--set", "optim.lr=3e-3", *common]) == 0
    assert metrics(sweep / "lr-0.003")[1]["reward/mean"] == metrics(lone)[1]["reward/mean"]


def test_a_variant_whose_verifier_fails_stops_alone(tmp_path, tiny_model_dir, monkeypatch, capsys) -> None:
    # Each variant trains on its own rows; only the second's name a verifier that always raises.
    monkeypatch.chdir(tmp_path)
    cfg = write_run(tmp_path, verifier=LENGTH_REWARD, model={"name_or_path": str(tiny_model_dir), "lora": {"r": 4}},
                    verifiers={faulty.path(faulty.Raises): {}}, train={"total_steps": 3, "local_eval_every": 0},
                    scoring={"num_workers": 0, "error_min_calls": 6, "error_window": 6})
    write_rows(tmp_path / "bad.jsonl", 12, faulty.path(faulty.Raises), lambda i: f"{i}+1", lambda i: str(i + 1))
    code = main(["sweep", str(cfg), "--vary", 'data.train=[{path="train.jsonl"}],[{path="bad.jsonl"}]',
                 "--output-dir", "sweep"])

    assert code == 1
    found = variants(tmp_path / "sweep")
    good, bad = found["train-path-train.jsonl"], found["train-path-bad.jsonl"]
    assert (good["status"], good["step"], good["reason"]) == ("completed", 3, None)
    assert bad["status"] == "failed" and bad["step"] == 0
    why = f"verifier {faulty.path(faulty.Raises)!r} failed 6 of its last 6 calls"
    assert why in bad["reason"] and "ValueError: this verifier always fails" in bad["reason"]
    assert metrics_steps(tmp_path / "sweep" / "train-path-train.jsonl") == [1, 2, 3]
    err = capsys.readouterr().err
    assert f"train-path-bad.jsonl: run stopped: {why}" in err and "Traceback" not in err


def _slow_sweep(tmp_path: Path, model_dir: Path) -> Path:
    return write_run(tmp_path, verifier=faulty.path(faulty.Slow), model={"name_or_path": str(model_dir), "lora": {"r": 4}},
                     rollout={"num_samples_per_prompt_rollout": 3, "response_length": 5},
                     train={"total_steps": 6, "local_eval_every": 0, "num_threads": 1}, scoring={"num_workers": 1})


def test_sigterm_saves_every_variant_and_the_sweep_or_one_variant_resumes_exactly(tmp_path, tiny_model_dir) -> None:
    cfg = _slow_sweep(tmp_path, tiny_model_dir)
    sweep = tmp_path / "sweep"
    args = ["sweep", str(cfg), "--vary", "optim.lr=1e-3,3e-3", "--output-dir", str(sweep)]
    both_going = lambda _: all(len(metrics_steps(sweep / n)) >= 2 for n in ("lr-0.001", "lr-0.003"))  # noqa: E731
    done = run_grpo(args, when=both_going, signals=[(signal.SIGTERM, 0.0)])

    assert done.returncode == 143 and "Traceback" not in done.output and done.leftovers == []
    assert done.lines[-1] == f"resume with: grpo-run sweep --resume {sweep}"
    found = variants(sweep)
    steps = {}
    for name, entry in found.items():
        assert entry["status"] == "interrupted" and entry["reason"].startswith("interrupted by SIGTERM after step")
        steps[name] = entry["step"]
        assert 1 <= steps[name] < 6 and metrics_steps(sweep / name) == list(range(1, steps[name] + 1))
        checkpoint = sweep / name / "checkpoints" / f"step_{steps[name]}"
        assert f"{name}: interrupted by SIGTERM after step {steps[name]}: checkpoint {checkpoint}" in done.lines

    # One variant goes on alone, as a run of its own; then the sweep goes on with the other.
    alone = sweep / "lr-0.003"
    assert main(["train", str(alone / "config.toml"), "--resume", str(alone)]) == 0
    assert main(["sweep", "--resume", str(sweep)]) == 0
    assert all(v["status"] == "completed" and v["step"] == 6 for v in variants(sweep).values())
    for name, lr in (("lr-0.001", "1e-3"), ("lr-0.003", "3e-3")):
        straight = tmp_path / f"straight-{lr}"
        assert main([str(cfg), "--output-dir", str(straight), "--set", f"optim.lr={lr}"]) == 0
        a = load_file(sweep / name / "checkpoints" / "step_6" / "adapter_model.safetensors")
        b = load_file(straight / "checkpoints" / "step_6" / "adapter_model.safetensors")
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), name
        assert metrics_steps(sweep / name) == list(range(1, 7))  # each step once


def test_the_report_of_a_sweep_compares_its_variants(tmp_path, tiny_model_dir, capsys) -> None:
    cfg = write_run(tmp_path, verifier=LENGTH_REWARD, eval_rows=3,
                    model={"name_or_path": str(tiny_model_dir), "lora": {"r": 4}},
                    train={"total_steps": 2, "local_eval_every": 1})
    sweep = tmp_path / "sweep"
    assert main(["sweep", str(cfg), "--vary", "run.seed=1,2", "--vary", "optim.lr=1e-3,3e-3",
                 "--output-dir", str(sweep)]) == 0
    capsys.readouterr()
    assert main(["report", str(sweep)]) == 0
    assert capsys.readouterr().out.startswith(f"wrote {sweep / 'report' / 'report.html'}")

    page = (sweep / "report" / "report.html").read_text()
    names = ["seed-1_lr-0.001", "seed-1_lr-0.003", "seed-2_lr-0.001", "seed-2_lr-0.003"]
    rows = re.findall(r"<tr><td>(.*?)</td></tr>", page)
    assert [re.sub(r"<[^>]+>", "", r.split("</td><td>")[0]) for r in rows] == names
    for row, name in zip(rows, names):
        cells = row.split("</td><td>")
        assert cells[2:4] == ["completed", "2"]
        assert f"href='../{name}/report/report.html'" in cells[0]
        assert (sweep / name / "report" / "report.html").is_file()
    pytest.importorskip("matplotlib")
    assert "<figure id='reward'>" in page and "<figure id='eval'>" in page
    assert (sweep / "report" / "reward.png").is_file()
