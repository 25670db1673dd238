"""What a quiet run prints: the stages in progress and for how long, once per ``report_waits_s``
of quiet (a fake clock), and a real run with a hung verifier saying what it waits for until the
timeout guard stops it."""

from __future__ import annotations

import asyncio
import re

import pytest

from support import faulty_verifiers as faulty
from support.processes import run_grpo
from support.runs import write_run

from grpo_run.core.loop.pipeline import PipelineMonitor
from grpo_run.core.loop.waiting import WaitReporter, describe_waits


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_the_description_names_each_stage_in_progress_longest_first(tmp_path):
    clock = Clock()
    monitor = PipelineMonitor(tmp_path, total_steps=5, async_steps=2, clock=clock)
    assert describe_waits(monitor.snapshot()) == "the next step"
    monitor.batch_started(1, 0)
    clock.now += 5
    monitor.batch_phase(1, "scoring")
    monitor.batch_started(2, 0)
    clock.now += 10
    monitor.engine_syncing(1)
    clock.now += 30
    assert describe_waits(monitor.snapshot()) == (
        "batch 1 scoring for 40 s; batch 2 generating for 40 s; the engine loading the weights of step 1 for 30 s")
    monitor.engine_synced(1)
    monitor.batch_phase(1, "ready")
    monitor.evaluating(True)
    clock.now += 3
    assert describe_waits(monitor.snapshot()) == "batch 2 generating for 43 s; the evaluation for 3 s"


def test_a_line_after_each_period_of_quiet_and_none_while_things_move(tmp_path):
    clock = Clock()
    monitor = PipelineMonitor(tmp_path, total_steps=5, async_steps=1, clock=clock)
    monitor.batch_started(1, 0)
    said: list[str] = []
    reporter = WaitReporter(monitor, said.append, every_s=10.0)
    for second in range(1, 40):  # the reporter checks once a second
        clock.now += 1
        if second == 5:
            monitor.batch_phase(1, "scoring")  # progress: the quiet starts again
        reporter.check()
    assert said == ["still waiting (10 s without progress): batch 1 scoring for 10 s",
                    "still waiting (20 s without progress): batch 1 scoring for 20 s",
                    "still waiting (30 s without progress): batch 1 scoring for 30 s"]
    said.clear()
    monitor.batch_phase(1, "ready")
    for _ in range(9):
        clock.now += 1
        reporter.check()
    assert said == []  # 9 s of quiet: nothing yet


def test_the_reporter_task_stops_with_the_loop(tmp_path):
    monitor = PipelineMonitor(tmp_path, total_steps=1, async_steps=1)

    async def scenario() -> None:
        task = asyncio.create_task(WaitReporter(monitor, print, every_s=0.05).run())
        await asyncio.sleep(0.2)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(scenario())


def test_a_hung_verifier_says_what_the_run_waits_for_until_it_stops(tmp_path, tiny_model_dir):
    cfg = write_run(tmp_path, verifier=faulty.path(faulty.Hang), train_rows=8, model={"name_or_path": str(tiny_model_dir)},
                    rollout={"num_unique_prompts_rollout": 4, "num_samples_per_prompt_rollout": 8, "response_length": 5},
                    scoring={"num_workers": 1, "timeout_s": 2.0}, logging={"progress": False, "report_waits_s": 4.0})
    done = run_grpo([str(cfg), "--output-dir", str(tmp_path / "run")], limit_s=400)
    assert done.returncode == 1 and "Traceback" not in done.output
    waits = [line for line in done.lines if line.startswith("still waiting")]
    assert waits and all(re.fullmatch(r"still waiting \(\d+ s without progress\): batch 1 scoring for \d+ s", w)
                         for w in waits), waits
    assert done.lines[-1].startswith(f"run stopped: verifier {faulty.path(faulty.Hang)!r} timed out on 3 rows in a row")
