"""Scoring worker processes under failure (docs/reliability.md): one owner per worker, so closing
while a call hangs is quick and clean; no traceback from a worker; workers ignore Ctrl-C and die
with their parent; a hung verifier stops the run after a few timeouts; leaking workers are
recycled."""

from __future__ import annotations

import asyncio
import os
import pickle
import signal
import subprocess
import sys
import textwrap
import threading
import time

import psutil
import pytest

from support import faulty_verifiers as faulty
from support.processes import subprocess_env
from support.scoring_helpers import MisbehavingVerifier

from grpo_run import NoConfig, VerifierConfig
from grpo_run.core.errors import RunError
from grpo_run.core.scoring.scorer import RewardScorer
from grpo_run.core.scoring.worker_process import CANCELLED

pytestmark = pytest.mark.timeout(300)


def rows(n: int, verifier: str, *, same_row: bool = False) -> list[dict]:
    return [{"id": "r0" if same_row else f"r{i}", "ground_truth": None, "verifier": verifier} for i in range(n)]


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_close_while_a_call_hangs_kills_the_worker_at_once_and_raises_nothing(capfd) -> None:
    scorer = RewardScorer({"hang": (faulty.Hang, NoConfig())}, num_workers=1, timeout_s=120.0)
    scorer.start()
    (pid,) = scorer.worker_pids
    outcome: dict = {}

    def score_in_a_thread() -> None:  # the training loop's thread, while close() comes from another
        try:
            outcome["result"] = asyncio.run(scorer.score(rows(2, "hang"), ["a", "b"]))
        except BaseException as exc:  # noqa: BLE001 -- whatever it is, the test reports it
            outcome["error"] = exc

    thread = threading.Thread(target=score_in_a_thread)
    thread.start()
    time.sleep(1.0)
    started = time.monotonic()
    scorer.close()
    closed_in = time.monotonic() - started
    thread.join(10)

    assert closed_in < 2.0 and not thread.is_alive()
    assert not _alive(pid) and scorer.worker_pids == []
    assert "error" not in outcome
    assert [s.error for s in outcome["result"]] == [f"hang: {CANCELLED}"] * 2
    assert "Traceback" not in capfd.readouterr().err


@pytest.mark.parametrize(
    ("verifier", "error"),
    [(faulty.RaisesKeyboardInterrupt, "raised KeyboardInterrupt: "), (faulty.Exit, "raised SystemExit: 3")],
)
def test_a_verifier_raising_keyboard_interrupt_or_exit_fails_only_its_call(capfd, verifier, error) -> None:
    with RewardScorer({"v": (verifier, NoConfig())}, num_workers=1, timeout_s=30.0) as scorer:
        first = asyncio.run(scorer.score(rows(3, "v"), ["a", "b", "c"]))
        pids = scorer.worker_pids
        asyncio.run(scorer.score(rows(1, "v"), ["d"]))
        assert scorer.worker_pids == pids  # the worker lived on
    assert [s.error for s in first] == [f"v: {error}"] * 3
    assert "Traceback" not in capfd.readouterr().err


def test_a_dying_worker_prints_nothing_and_is_replaced(capfd) -> None:
    with RewardScorer({"abort": (faulty.Abort, NoConfig())}, num_workers=1, timeout_s=30.0) as scorer:
        scored = asyncio.run(scorer.score(rows(2, "abort"), ["a", "b"]))
    assert [s.error for s in scored] == ["abort: worker process died (exit code -6)"] * 2
    assert "Traceback" not in capfd.readouterr().err


def test_a_verifier_that_cannot_be_built_or_imported_is_one_run_error(capfd, monkeypatch) -> None:
    with RewardScorer({"broken": (faulty.InitFails, NoConfig())}, num_workers=1) as scorer:
        with pytest.raises(RunError, match="^a scoring worker could not start its verifiers: ValueError: cannot find my model$"):
            asyncio.run(scorer.score(rows(1, "broken"), ["a"]))
        started = time.monotonic()
        with pytest.raises(RunError, match="cannot find my model"):  # remembered: no second start
            asyncio.run(scorer.score(rows(1, "broken"), ["a"]))
        assert time.monotonic() - started < 0.5
    # A class the worker cannot import (here: its module exists only in this process).
    module = type(sys)("only_in_the_parent")
    exec(textwrap.dedent("""
        from grpo_run import NoConfig
        class Gone:
            name = "gone"
            Config = NoConfig
            def __init__(self, config): pass
            def score(self, completion, ground_truth, row): return 1.0
    """), module.__dict__)
    module.Gone.__module__ = "only_in_the_parent"
    monkeypatch.setitem(sys.modules, "only_in_the_parent", module)
    with RewardScorer({"gone": (module.Gone, NoConfig())}, num_workers=1) as scorer:
        with pytest.raises(RunError, match="could not start its verifiers: ModuleNotFoundError: No module named 'only_in_the_parent'"):
            asyncio.run(scorer.score(rows(1, "gone"), ["a"]))
    assert "Traceback" not in capfd.readouterr().err


def test_workers_ignore_sigint_the_parent_decides() -> None:
    with RewardScorer({"pid": (faulty.Pid, NoConfig())}, num_workers=1) as scorer:
        scorer.start()
        (pid,) = scorer.worker_pids
        os.kill(pid, signal.SIGINT)
        time.sleep(0.3)
        assert _alive(pid)
        scored = asyncio.run(scorer.score(rows(1, "pid"), ["a"]))
        assert scored.metrics()["verifier/pid/pid"] == pid


def test_workers_die_with_their_parent_even_on_sigkill(tmp_path) -> None:
    script = textwrap.dedent("""
        import asyncio, threading, time
        from grpo_run import NoConfig
        from grpo_run.core.scoring.scorer import RewardScorer
        from support.faulty_verifiers import Hang
        scorer = RewardScorer({"hang": (Hang, NoConfig())}, num_workers=2, timeout_s=600, chunk_size=1)
        scorer.start()
        rows = [{"id": f"r{i}", "verifier": "hang", "ground_truth": None} for i in range(2)]
        threading.Thread(target=asyncio.run, args=(scorer.score(rows, ["a", "b"]),), daemon=True).start()
        time.sleep(1.0)  # both workers are busy in a hung call: they would not notice a closed pipe
        print("PIDS", *scorer.worker_pids, flush=True)
        time.sleep(600)
    """)
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                              env=subprocess_env(), start_new_session=True)
    try:
        while not (line := parent.stdout.readline()).startswith("PIDS"):
            assert line, "the parent exited early"
        pids = [int(p) for p in line.split()[1:]]
        assert len(pids) == 2 and all(_alive(p) for p in pids)
        parent.kill()
        parent.wait()
        deadline = time.monotonic() + 5
        while any(_alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not any(_alive(p) for p in pids)
    finally:
        for pid in pids if "pids" in locals() else []:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_a_hung_verifier_stops_after_timeouts_on_three_rows_not_fifty_calls(tmp_path, monkeypatch) -> None:
    # Four samples of each row (a group), all hanging. Calls take the rows in turns, so the first
    # three timeouts fall on three rows and the run stops (not after 4 + 4 + 1 timeouts).
    calls = tmp_path / "calls"
    monkeypatch.setenv("HANG_CALLS_FILE", str(calls))
    with RewardScorer({"hang": (faulty.HangRecording, NoConfig())}, num_workers=1, timeout_s=0.5,
                      max_consecutive_timeouts=3, chunk_size=64) as scorer:
        batch = [row for i in range(6) for row in [{"id": f"p{i}", "verifier": "hang", "ground_truth": None}] * 4]
        started = time.monotonic()
        with pytest.raises(RunError) as caught:
            asyncio.run(scorer.score(batch, ["x"] * len(batch)))
        took = time.monotonic() - started
        assert str(caught.value) == (
            "verifier 'hang' timed out on 3 rows in a row (ids 'p0', 'p1', 'p2'; scoring.timeout_s = 0.5): it looks "
            "hung. Fix the verifier, raise scoring.timeout_s, or raise scoring.max_consecutive_timeouts (0 disables "
            "this check)"
        )
        assert calls.read_text().split() == ["p0", "p1", "p2"]  # the other 21 calls never started
        assert took < 60  # three timeouts and worker starts (~1-2 s each; ~5 s on a loaded machine)
        with pytest.raises(RunError, match="timed out on 3 rows in a row"):  # and the scorer stays stopped
            asyncio.run(scorer.score(batch[:1], ["x"]))


def test_timeouts_on_one_row_alone_do_not_stop_the_run() -> None:
    specs = {"flaky": (MisbehavingVerifier, VerifierConfig())}
    with RewardScorer(specs, num_workers=1, timeout_s=0.3, max_consecutive_timeouts=2) as scorer:
        scored = asyncio.run(scorer.score(rows(3, "flaky", same_row=True) + rows(1, "flaky"), ["hang"] * 3 + ["ok"]))
    assert [s.error is not None for s in scored] == [True, True, True, False]


def test_workers_are_recycled_after_max_calls() -> None:
    with RewardScorer({"pid": (faulty.Pid, NoConfig())}, num_workers=1, chunk_size=2, max_calls_per_worker=4) as scorer:
        pids = []
        for _ in range(3):
            scored = asyncio.run(scorer.score(rows(4, "pid"), ["a"] * 4))  # two chunks of two calls
            pids.append(scored.metrics()["verifier/pid/pid"])
        # Each batch of 4 ran in a fresh worker (the third recycle may still be under way).
        assert len(set(pids)) == 3 and all(p == int(p) for p in pids) and scorer.workers_recycled >= 2


def test_a_leaking_worker_is_recycled_above_max_worker_rss_mb() -> None:
    with RewardScorer({"leak": (faulty.Leak, NoConfig())}, num_workers=1, chunk_size=4, max_worker_rss_mb=150) as scorer:
        scorer.start()
        base_mb = psutil.Process(scorer.worker_pids[0]).memory_info().rss / 2**20
        first = asyncio.run(scorer.score(rows(4, "leak"), ["a"] * 4))  # +64 MiB
        grown = [asyncio.run(scorer.score(rows(4, "leak"), ["a"] * 4)) for _ in range(4)]  # +256 MiB more
        pids = {first.metrics()["verifier/leak/pid"], *(g.metrics()["verifier/leak/pid"] for g in grown)}
        live_mb = psutil.Process(scorer.worker_pids[0]).memory_info().rss / 2**20 if scorer.worker_pids else 0.0
    assert base_mb + 64 < 150  # the limit sits between one chunk's growth and the total
    assert scorer.workers_recycled >= 1 and len(pids) >= 2 and live_mb < 150 + 64


def test_specs_travel_pickled_and_are_unpickled_in_the_worker() -> None:
    # What the worker receives is bytes; pickling errors are reported up front, by name.
    with pytest.raises(ValueError, match="verifier 'local': its class and config must be picklable"):
        class Local:
            name = "local"
            Config = NoConfig

            def __init__(self, config): ...

            def score(self, c, g, r): return 1.0

        RewardScorer({"local": (Local, NoConfig())}, num_workers=1)
    assert pickle.loads(pickle.dumps({"pid": (faulty.Pid, NoConfig())}))["pid"][0] is faulty.Pid
