"""A stop signal on a held event loop saves the last finished step only when that is consistent
(issue 33, item 5; the process-level test is tests/cli/test_hostile_env_hangs.py)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from grpo_run.core.loop.held_loop import HoldTally, save_on_held_loop
from grpo_run.core.loop.observers import Checkpointer, StepEvent


def _loop(version: int, learner_busy: int | None = None) -> SimpleNamespace:
    return SimpleNamespace(state=SimpleNamespace(version=version), learner_held=False, learner_busy=learner_busy,
                           resume_rollout_state=lambda: {"drawn": version + 1})


def _save(tmp_path: Path, loop: SimpleNamespace, held=("environment 'x' step", 5.0), start=(0, None)):
    saved: list[tuple[int, object]] = []
    checkpointer = Checkpointer(lambda step, state: saved.append((step, state)), save_freq=0, save_final=False)
    result = save_on_held_loop(loop, checkpointer, lambda: held, lambda s: tmp_path / f"step_{s}", start)
    return result, saved


def test_an_idle_learner_has_its_last_finished_step_saved(tmp_path):
    loop = _loop(3)
    result, saved = _save(tmp_path, loop)
    assert saved == [(3, {"drawn": 4})] and result.checkpoint == tmp_path / "step_3" and result.note is None
    assert loop.learner_held  # no learner step may start while it saves


def test_a_learner_step_in_progress_is_not_saved_and_the_previous_checkpoint_stands(tmp_path):
    result, saved = _save(tmp_path, _loop(3, learner_busy=4), start=(2, tmp_path / "step_2"))
    assert saved == [] and result.checkpoint == tmp_path / "step_2"
    assert result.note == "the learner was in step 4, which is not saved"


def test_a_loop_no_longer_held_saves_on_its_own(tmp_path):
    result, saved = _save(tmp_path, _loop(3), held=None)
    assert result is None and saved == []


def test_the_hold_tally_adds_up_a_steps_holds_the_one_going_on_included_and_starts_afresh_each_step():
    tally = HoldTally(start_step=3)
    assert tally.total(None) is None
    tally.add("environment 'x' step", 2.0)
    tally.add("environment 'x' step", 1.5)
    assert tally.total(("async verifier 'v'", 4.0)) == (
        "code has held the event loop for 8 s in total since step 3 (3 holds, the longest 4 s: "
        "environment 'x' step 2x, async verifier 'v' 1x)", 7.5)
    tally.on_step(StepEvent(step=4, metrics={}))
    assert tally.total(None) is None
