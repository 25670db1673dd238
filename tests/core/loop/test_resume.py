"""``grpo-run CONFIG --resume PATH``: a run of 4 steps and a run resumed from its step-2
checkpoint end with identical weights (fp32, CPU, same seeds).

Exactness needs every source of randomness restored. The learner, sampler and global RNGs are
in the checkpoint; the sampling seeds are a function of the batch (or evaluation) being sampled
(``core/rollout/seeds.py``), so no engine state is needed for them, and a skipped evaluation
cannot shift them.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from support.runs import write_run
from support.verifiers import LENGTH_REWARD

from grpo_run.core.loop.checkpoint import find_checkpoint, load_trainer_state
from grpo_run.cli.main import main
from grpo_run.core.errors import UserError
from grpo_run.core.placement.learner_group import InProcessLearner
from grpo_run.plugins.engines.hf import HFEngine



def write_config(tmp_path: Path, model_dir: Path) -> Path:
    return write_run(
        tmp_path, verifier=LENGTH_REWARD, train_rows=10, prompt=lambda i: f"{i}*3", gold=lambda i: str(3 * i),
        model={"name_or_path": str(model_dir)},
        rollout={"num_samples_per_prompt_rollout": 3, "response_length": 5},
        algorithm={"num_mini_batches": 2},
        optim={"lr": 1e-3, "lr_scheduler": "linear"},
        kl={"beta": 0.1, "reference": "polyak", "alpha": 0.5},
        train={"total_steps": 4},
        checkpoint={"save_freq": 2},
    )


@pytest.fixture
def engine_state(monkeypatch):
    """Give the hf engine a checkpointable state: its generate-call counter (the sampling seed)."""
    monkeypatch.setattr(HFEngine, "state_dict", lambda self: {"calls": self._calls}, raising=False)
    monkeypatch.setattr(HFEngine, "load_state_dict", lambda self, s: setattr(self, "_calls", int(s["calls"])), raising=False)


def metrics_by_step(run: Path) -> dict[int, dict[str, float]]:
    lines = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    timing = ("perf/", "latency_")  # wall-clock numbers differ between any two runs
    return {line["step"]: {k: v for k, v in line.items() if not any(t in k for t in timing)} for line in lines}


def test_resumed_run_ends_with_identical_weights(tmp_path: Path, tiny_model_dir: Path, engine_state, monkeypatch) -> None:
    cfg = write_config(tmp_path, tiny_model_dir)
    full, resumed = tmp_path / "full", tmp_path / "resumed"
    assert main([str(cfg), "--output-dir", str(full)]) == 0
    assert main([str(cfg), "--output-dir", str(resumed), "--resume", str(full / "checkpoints" / "step_2")]) == 0

    a = load_file(full / "checkpoints" / "step_4" / "model.safetensors")
    b = load_file(resumed / "checkpoints" / "step_4" / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    sa, sb = (load_trainer_state(run / "checkpoints" / "step_4") for run in (full, resumed))
    assert sa["step"] == sb["step"] == 4 and sa["sampler"] == sb["sampler"] and sa["engine"] == sb["engine"]
    assert sa["learner"]["steps"] == sb["learner"]["steps"] == 4
    assert sa["learner"]["scheduler"] == sb["learner"]["scheduler"]
    ref_a, ref_b = sa["learner"]["reference"], sb["learner"]["reference"]
    assert all(torch.equal(ref_a[k], ref_b[k]) for k in ref_a)  # the Polyak reference too
    # The same batches were drawn, generated, scored and learnt from after the resume point.
    full_metrics, resumed_metrics = metrics_by_step(full), metrics_by_step(resumed)
    assert sorted(resumed_metrics) == [3, 4] and full_metrics[3]["reward/std"] > 0
    assert all(resumed_metrics[step] == full_metrics[step] for step in (3, 4))

    # Without the engine's state (its counter of unseeded calls): the same prompts (the sampler
    # ends in the same state), steps and LR schedule.
    monkeypatch.undo()
    other = tmp_path / "other"
    assert main([str(cfg), "--output-dir", str(other), "--resume", str(full / "checkpoints" / "step_2")]) == 0
    so = load_trainer_state(other / "checkpoints" / "step_4")
    assert so["sampler"] == sa["sampler"] and so["learner"]["scheduler"] == sa["learner"]["scheduler"]
    assert [metrics_by_step(other)[s]["optim/lr"] for s in (3, 4)] == [full_metrics[s]["optim/lr"] for s in (3, 4)]


def test_resume_finds_the_newest_checkpoint_and_refuses_a_finished_run(tmp_path: Path, capsys) -> None:
    run = tmp_path / "run"
    for step in (2, 10):
        (run / "checkpoints" / f"step_{step}").mkdir(parents=True)
        torch.save({"step": step}, run / "checkpoints" / f"step_{step}" / "trainer_state.pt")
    assert find_checkpoint(run) == run / "checkpoints" / "step_10"  # no `latest` file: highest step
    (run / "checkpoints" / "latest").write_text("step_2\n")
    assert find_checkpoint(run) == find_checkpoint(run / "checkpoints") == run / "checkpoints" / "step_2"
    assert find_checkpoint(run / "checkpoints" / "step_10") == run / "checkpoints" / "step_10"
    with pytest.raises(UserError, match="no checkpoint found"):
        find_checkpoint(tmp_path)
    with pytest.raises(UserError, match="no such file or directory"):
        find_checkpoint(tmp_path / "nope")

    cfg = tmp_path / "run.toml"
    cfg.write_text('[[data.train]]\npath = "a.jsonl"\n[train]\ntotal_steps = 2\nlocal_eval_every = 0\n[verifiers.math]\n')
    assert main([str(cfg), "--resume", str(run)]) == 2
    err = capsys.readouterr().err
    assert "checkpoint step_2 is at step 2, and train.total_steps = 2: nothing left to train" in err


def test_with_async_steps_2_the_batches_in_flight_are_recorded_and_reported_on_resume(tmp_path, tiny_model_dir, capsys) -> None:
    cfg = write_config(tmp_path, tiny_model_dir)
    run = tmp_path / "run"
    assert main([str(cfg), "--output-dir", str(run), "--set", "rollout.async_steps=2"]) == 0
    # At the step-2 save, batch 3 had been drawn (and generated by the step-1 policy).
    assert load_trainer_state(run / "checkpoints" / "step_2")["in_flight"] == [3]
    capsys.readouterr()
    resumed = tmp_path / "resumed"
    assert main([str(cfg), "--output-dir", str(resumed), "--set", "rollout.async_steps=2",
                 "--resume", str(run / "checkpoints" / "step_2")]) == 0
    assert ("batches 3 were in flight at the step-2 checkpoint: they are generated again by the step-2 policy "
            "(rollout.async_steps = 2; the resumed run is not bit-identical to an uninterrupted one)") in capsys.readouterr().err
    events = [json.loads(line) for line in (resumed / "log.jsonl").read_text().splitlines()]
    assert [e["batches"] for e in events if e["event"] == "batches_regenerated"] == [[3]]


def test_sigterm_during_a_learner_step_that_an_evaluation_follows_resumes_exactly(tmp_path, tiny_model_dir, monkeypatch) -> None:
    # SIGTERM arrives while step 2 trains: the step finishes, its evaluation is skipped, and the
    # run saves step_2. The uninterrupted run evaluated after step 2 (greedy and sampled) before
    # generating batch 3; sampling seeds must not depend on that skipped call.
    cfg = write_run(
        tmp_path, verifier=LENGTH_REWARD, train_rows=10, eval_rows=3, prompt=lambda i: f"{i}*3", gold=lambda i: str(3 * i),
        model={"name_or_path": str(tiny_model_dir)},
        rollout={"num_samples_per_prompt_rollout": 3, "response_length": 5},
        optim={"lr": 1e-3},
        train={"total_steps": 4, "local_eval_every": 1},
        eval={"num_samples": 2},
    )
    straight, stopped = tmp_path / "straight", tmp_path / "stopped"
    assert main([str(cfg), "--output-dir", str(straight)]) == 0

    original = InProcessLearner.train_step

    def train_step(self, seqs):
        if self.steps == 1:  # step 2 is being trained
            os.kill(os.getpid(), signal.SIGTERM)
        return original(self, seqs)

    with monkeypatch.context() as patched:
        patched.setattr(InProcessLearner, "train_step", train_step)
        assert main([str(cfg), "--output-dir", str(stopped)]) == 143
    assert "eval/accuracy" not in metrics_by_step(stopped)[2]  # the evaluation after step 2 was skipped
    assert main([str(cfg), "--output-dir", str(stopped), "--resume", str(stopped / "checkpoints" / "step_2")]) == 0

    a = load_file(straight / "checkpoints" / "step_4" / "model.safetensors")
    b = load_file(stopped / "checkpoints" / "step_4" / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    full, resumed = metrics_by_step(straight), metrics_by_step(stopped)
    assert all(resumed[step] == full[step] for step in (3, 4))  # rewards, eval/pass@k included
