"""Signals, kills and listening sockets of a real ``grpo-run`` process on a local Ray instance
(``heavy``: Ray is an extra), as docs/reliability.md states them:

* SIGTERM saves a checkpoint, prints the resume line and exits 143, as on the local backend
  (``ray.init`` installs a SIGTERM handler of its own, which used to abort the run: exit 134);
* SIGKILL of the driver takes the whole Ray instance it started along: no process of its session
  is left (the raylet's agents used to live on);
* the learners' rendezvous listens on the loopback interface only.

Each test starts ``grpo-run`` in a session of its own and looks only at that session's processes.
"""

from __future__ import annotations

import json
import re
import signal
from pathlib import Path

import psutil
import pytest

from support import faulty_verifiers as faulty
from support.processes import metrics_steps, run_grpo
from support.runs import write_run

from grpo_run.core.loop.checkpoint import find_checkpoint, load_trainer_state

pytestmark = [pytest.mark.heavy, pytest.mark.timeout(900)]
pytest.importorskip("ray")


def _config(tmp_path: Path, model_dir: Path, **sections) -> Path:
    return write_run(
        tmp_path, verifier=faulty.path(faulty.Slow), train_rows=12, eval_rows=3,
        model={"name_or_path": str(model_dir)},
        rollout={"num_samples_per_prompt_rollout": 3, "response_length": 5},
        optim={"lr": 1e-3},
        distributed={"backend": "ray"},
        **{"train": {"total_steps": 20, "local_eval_every": 1}, "scoring": {"num_workers": 1}, **sections},
    )


def test_sigterm_under_ray_saves_a_checkpoint_and_exits_143(tmp_path, tiny_model_dir, monkeypatch) -> None:
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    cfg = _config(tmp_path, tiny_model_dir)
    run = tmp_path / "run"
    done = run_grpo([str(cfg), "--output-dir", str(run)], signals=[(signal.SIGTERM, 0.0)],
                    when=lambda _: len(metrics_steps(run)) >= 3, limit_s=600, settle_s=20)

    assert done.returncode == 143, done.output[-3000:]
    assert "Traceback" not in done.output and done.leftovers == []
    step = int(re.search(r"after step (\d+):", done.output).group(1))
    checkpoint = run / "checkpoints" / f"step_{step}"
    assert done.lines[-2:] == [
        f"interrupted by SIGTERM after step {step}: checkpoint {checkpoint}",
        f"resume with: grpo-run train {cfg} --output-dir {run} --resume {checkpoint}",
    ]
    assert step >= 2 and find_checkpoint(run) == checkpoint and load_trainer_state(checkpoint)["step"] == step


def test_sigkill_of_the_driver_takes_its_ray_instance_along(tmp_path, tiny_model_dir, monkeypatch) -> None:
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    cfg = _config(tmp_path, tiny_model_dir)
    run = tmp_path / "run"
    done = run_grpo([str(cfg), "--output-dir", str(run)], signals=[(signal.SIGKILL, 0.0)],
                    when=lambda _: len(metrics_steps(run)) >= 2, limit_s=600, settle_s=20)

    assert done.returncode == -signal.SIGKILL
    assert done.leftovers == []  # no ray::DashboardAgent, ray::RuntimeEnvAgent, raylet, worker...


def _listening(pids: list[int]) -> list[tuple[int, str, int]]:
    found = []
    for pid in pids:
        try:
            conns = psutil.Process(pid).net_connections("inet")
        except psutil.Error:
            continue
        found += [(pid, c.laddr.ip, c.laddr.port) for c in conns if c.status == psutil.CONN_LISTEN]
    return found


def test_the_learners_rendezvous_listens_on_loopback_only(tmp_path, tiny_model_dir, monkeypatch) -> None:
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    cfg = _config(tmp_path, tiny_model_dir, learner={"num_learners": 2})
    run = tmp_path / "run"
    seen: dict[str, object] = {}

    def look(_: str) -> bool:
        log = run / "log.jsonl"
        started = [json.loads(line) for line in log.read_text().splitlines()
                   if '"learners_started"' in line] if log.exists() else []
        if not started or len(metrics_steps(run)) < 2:
            return False
        ranks = [r["pid"] for r in started[0]["ranks"]]
        seen["rendezvous"] = started[0]["rendezvous"]
        seen["sockets"] = _listening(ranks)
        return True

    done = run_grpo([str(cfg), "--output-dir", str(run)], when=look, signals=[(signal.SIGTERM, 0.0)],
                    limit_s=600, settle_s=20)
    assert done.returncode == 143, done.output[-3000:]
    host, port = re.fullmatch(r"tcp://([\d.]+):(\d+)", str(seen["rendezvous"])).groups()
    assert host == "127.0.0.1"
    store = [s for s in seen["sockets"] if s[2] == int(port)]
    assert store and all(ip == "127.0.0.1" for _, ip, _ in store), seen["sockets"]
