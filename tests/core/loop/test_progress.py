"""The console: ETA arithmetic, the no-signal warning (its window and its causes), the closing
summary, and a whole run whose every step is skipped saying so."""

from __future__ import annotations

from pathlib import Path

import pytest

from support.runs import write_run

from grpo_run.cli.main import main
from grpo_run.core.loop.progress import Eta, RunProgress, SignalWatch, final_summary, format_duration


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_eta_uses_the_average_pace_since_the_first_step() -> None:
    clock = Clock()
    eta = Eta(total_steps=10, clock=clock)
    assert eta.update(1) is None  # nothing known about the pace yet
    assert eta.update(1, step_s=3.0) == pytest.approx(27.0)  # 9 steps left at the last step's 3 s
    clock.now += 8.0
    assert eta.update(5) == pytest.approx(5 * 2.0)  # 4 steps took 8 s: 2 s each, 5 left


def test_eta_is_capped_by_the_runtime_limit() -> None:
    clock = Clock()
    eta = Eta(total_steps=100, max_runtime_s=60.0, clock=clock)
    eta.update(1)
    clock.now += 10.0
    assert eta.update(2) == pytest.approx(50.0)  # 98 x 10 s, but only 50 s of the limit are left


def test_format_duration() -> None:
    assert [format_duration(s) for s in (0, 42.4, 725, 10931)] == ["0:00", "0:42", "12:05", "3:02:11"]


def _step(skipped: bool, reward: float = 0.0, solve: float = 0.0) -> dict[str, float]:
    return {"rollout/sequences_trained": 0.0 if skipped else 12.0, "reward/mean": reward, "reward/solve_rate": solve}


def test_warns_when_more_than_half_a_window_was_skipped() -> None:
    watch = SignalWatch(total_steps=100, temperature=0.3, group_size=2)
    texts = [watch.add(s, _step(skipped=s % 10 < 6)) for s in range(1, 11)]  # steps 1-5 and 10 skipped
    assert texts[:9] == [None] * 9
    assert texts[9] == (
        "6 of the last 10 steps (1-10) were skipped: in every group all completions of a prompt got the same "
        "reward, so there was nothing to learn. Likely causes: the reward is always 0 (the task is too hard for "
        "the model, or the verifier does not accept its answers: read the completions in rollouts/, see "
        "logging.log_rollouts_every); rollout.temperature = 0.3 is too low for varied completions; "
        "rollout.num_samples_per_prompt_rollout = 2 is too small for a group to differ."
    )


def test_half_a_window_skipped_is_no_warning_and_causes_follow_the_rewards() -> None:
    watch = SignalWatch(total_steps=4, temperature=1.0, group_size=8)
    assert [watch.add(s, _step(skipped=s <= 2)) for s in (1, 2, 3, 4)] == [None] * 4  # 2 of 4
    solved = SignalWatch(total_steps=2, temperature=1.0, group_size=8)
    solved.add(1, _step(True, reward=1.0, solve=1.0))
    assert "every completion is solved (the task is too easy" in solved.add(2, _step(True, reward=1.0, solve=1.0))
    mixed = SignalWatch(total_steps=2, temperature=1.0, group_size=8)
    mixed.add(1, _step(True, reward=1.0, solve=1.0))
    assert "always 0 or always the maximum (mean 0.500)" in mixed.add(2, _step(True, reward=0.0, solve=0.0))


def test_a_partial_window_is_judged_at_the_end() -> None:
    watch = SignalWatch(total_steps=25, temperature=1.0, group_size=8)
    for s in range(1, 11):
        assert watch.add(s, _step(False)) is None
    for s in range(11, 14):
        assert watch.add(s, _step(True)) is None
    assert watch.flush().startswith("3 of the last 3 steps (11-13) were skipped")
    assert watch.flush() is None  # the window is closed
    assert watch.add(0, _step(True)) is None  # the starting eval is not a step


def test_final_summary_names_run_checkpoint_and_report_command() -> None:
    lines = final_summary(Path("runs/my run"), 12, "train.total_steps reached", 0.9512, Path("runs/my run/checkpoints/step_12"))
    assert lines == [
        "done after 12 steps (train.total_steps reached); eval/accuracy 0.951",
        "run directory: runs/my run",
        "last checkpoint: runs/my run/checkpoints/step_12",
        "report: grpo-run report 'runs/my run'",
    ]
    assert final_summary(Path("r"), 1, "x", None, None)[0] == "done after 1 steps (x)"
    assert final_summary(Path("r"), 1, "x", None, None)[2] == "last checkpoint: none (checkpoint.save_final = false)"


def test_plain_progress_lines_carry_the_eta(capsys) -> None:
    clock = Clock()
    progress = RunProgress(20, enabled=False, clock=clock)
    progress.update(1, {"reward/mean": 0.5, "perf/step_s": 2.0})
    clock.now += 18.0
    progress.update(10, {"reward/mean": 0.25, "perf/step_s": 2.0, "rollout/sequences_trained": 4.0})
    progress.close()
    err = capsys.readouterr().err
    assert "step 10/20  reward 0.250  eval acc -" in err and err.rstrip().endswith("eta 0:20")  # 10 x 2 s


def test_a_run_that_never_learns_says_why(tmp_path: Path, capsys) -> None:
    # No completion can equal the gold "zzzz": every group has zero spread and is filtered.
    cfg = write_run(tmp_path, verifier="exact-match", gold=lambda i: "zzzz",
                    algorithm={"filter_zero_std_samples": True}, train={"total_steps": 4})
    out = tmp_path / "out"
    assert main([str(cfg), "--output-dir", str(out)]) == 0
    err = capsys.readouterr().err
    assert "warning: 4 of the last 4 steps (1-4) were skipped" in err
    assert "Likely causes: the reward is always 0" in err
    assert "rollout.num_samples_per_prompt_rollout = 4 is too small" in err
    tail = err.rstrip().splitlines()[-4:]
    assert tail == [
        "done after 4 steps (train.total_steps reached)",
        f"run directory: {out}",
        f"last checkpoint: {out / 'checkpoints' / 'step_4'}",
        f"report: grpo-run report {out}",
    ]
    assert err.index("warning: 4 of the last 4") < err.index("done after 4 steps")
