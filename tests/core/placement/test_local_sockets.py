"""A run with two learner ranks on the local backend listens on the loopback interface only:
the ranks' rendezvous store and gloo's connections (torch's own ``init_method`` rendezvous
listens on every interface)."""

from __future__ import annotations

import ipaddress
import os
import signal

import psutil
import pytest

from support import faulty_verifiers as faulty
from support.processes import metrics_steps, run_grpo
from support.runs import write_run

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def _session_listeners(sid: int) -> list[tuple[str, str, int]]:
    """``(process, address, port)`` of every listening socket of session ``sid``'s processes."""
    found = []
    for proc in psutil.process_iter(["name"]):
        try:
            if os.getsid(proc.pid) != sid:
                continue
            found += [(proc.info["name"], c.laddr.ip, c.laddr.port) for c in proc.net_connections("inet")
                      if c.status == psutil.CONN_LISTEN]
        except (OSError, psutil.Error):
            continue
    return found


def test_two_learner_ranks_listen_on_loopback_only(tmp_path, tiny_model_dir) -> None:
    cfg = write_run(
        tmp_path, verifier=faulty.path(faulty.Slow), train_rows=12,
        model={"name_or_path": str(tiny_model_dir)},
        rollout={"num_samples_per_prompt_rollout": 3, "response_length": 5},
        train={"total_steps": 20}, scoring={"num_workers": 1}, learner={"num_learners": 2},
    )
    run = tmp_path / "run"
    seen: list[tuple[str, str, int]] = []

    def look(_: str) -> bool:
        if len(metrics_steps(run)) < 1:
            return False
        # run_grpo starts grpo-run as the leader of a new session: its pid is the session id.
        leader = next(c for c in psutil.Process().children() if str(run) in " ".join(c.cmdline()))
        seen.extend(_session_listeners(leader.pid))
        return True

    done = run_grpo([str(cfg), "--output-dir", str(run)], when=look, signals=[(signal.SIGTERM, 0.0)])
    assert done.returncode == 143, done.output[-3000:]
    assert len(seen) >= 2, seen  # the store, and gloo's sockets
    assert [s for s in seen if not ipaddress.ip_address(s[1]).is_loopback] == []
