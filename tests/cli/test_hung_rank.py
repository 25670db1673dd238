"""A learner rank that hangs (here: stopped with SIGSTOP) ends the run after
``learner.hang_timeout_s``, not ``collective_timeout_s``, with one line naming *that* rank
(``heavy``: DeepSpeed and Ray are extras). Before the heartbeats, the run waited the whole
collective timeout and then blamed the healthy rank that had waited for it (under Ray, with a
30-line remote traceback)."""

from __future__ import annotations

import json
import os
import re
import signal
import time
from pathlib import Path

import pytest

from support import faulty_verifiers as faulty
from support.processes import metrics_steps, run_grpo
from support.runs import write_run

pytestmark = [pytest.mark.heavy, pytest.mark.timeout(900)]

HANG_TIMEOUT_S = 20


def _rank_pids(run: Path) -> list[int]:
    log = run / "log.jsonl"
    for line in log.read_text().splitlines() if log.exists() else []:
        record = json.loads(line)
        if record.get("event") == "learners_started":
            return [rank["pid"] for rank in record["ranks"]]
    return []


@pytest.mark.parametrize("placement", [
    {"learner": {"strategy": "deepspeed"}},
    {"distributed": {"backend": "ray"}},
], ids=["deepspeed", "ray"])
def test_a_stopped_rank_is_named_in_one_line_long_before_the_collective_timeout(
    tmp_path, tiny_model_dir, monkeypatch, placement
) -> None:
    pytest.importorskip("deepspeed" if "learner" in placement else "ray")
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    learner = {"num_learners": 2, "hang_timeout_s": HANG_TIMEOUT_S, "collective_timeout_s": 600,
               **placement.get("learner", {})}
    cfg = write_run(
        tmp_path, verifier=faulty.path(faulty.Slow), train_rows=12,
        model={"name_or_path": str(tiny_model_dir)},
        rollout={"num_samples_per_prompt_rollout": 3, "response_length": 5},
        train={"total_steps": 50}, scoring={"num_workers": 1}, learner=learner,
        **{k: v for k, v in placement.items() if k != "learner"},
    )
    run = tmp_path / "run"
    stopped: list[int] = []

    def stop_rank_1(_: str) -> bool:
        if len(metrics_steps(run)) < 1:
            return False
        stopped.append(_rank_pids(run)[1])
        os.kill(stopped[0], signal.SIGSTOP)
        stopped.append(time.monotonic())
        return True

    try:
        done = run_grpo([str(cfg), "--output-dir", str(run)], when=stop_rank_1, limit_s=600, settle_s=20)
    finally:
        if stopped:
            try:
                os.kill(stopped[0], signal.SIGKILL)
            except ProcessLookupError:
                pass
    took = time.monotonic() - stopped[1]
    assert done.returncode == 1, done.output[-3000:]
    assert took < HANG_TIMEOUT_S + 60  # the collective timeout is 600 s
    pid = stopped[0]
    line = (rf"run stopped: learner rank 1 \((Ray actor \w+, )?pid {pid}( on \S+)?\) stopped responding \(no "
            rf"heartbeat for {HANG_TIMEOUT_S} s\) during \w+ \(step \d+\); the run stops .*")
    # The last line of grpo-run's own; multiprocessing's resource tracker may add a warning about
    # the killed rank's semaphores after it.
    ours = [text for text in done.lines if text.startswith("run stopped:")]
    assert len(ours) == 1 and re.fullmatch(line, ours[0]), done.output[-3000:]
    assert "Traceback" not in done.output and done.leftovers == []
