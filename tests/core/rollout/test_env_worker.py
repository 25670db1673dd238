"""Environments in worker processes (``environment.isolation = "process"``): calls run in a worker
of their own, an episode stays on one, what they raise comes back as the episode's error, a hung
call kills its worker, and a worker over its memory limit is replaced once its episodes end."""

from __future__ import annotations

import concurrent.futures
import os
import time

import psutil
import pytest

import grpo_run
from grpo_run.core.rollout.env_processes import EnvironmentProcesses
from grpo_run.core.rollout.env_worker import IsolatedEnvironment, WorkerCallError
from support.worker_envs import WorkerEnv, WorkerEnvConfig

pytestmark = pytest.mark.timeout(120)


def _dead(proc: psutil.Process) -> bool:
    """Gone, or a zombie its parent has not reaped yet (killed: SIGKILL lands within moments)."""
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            if proc.status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.02)
    return False


def _action(text: str) -> grpo_run.Action:
    return grpo_run.Action(grpo_run.ParsedTurn(text), "stop", 0)


def _isolated(config=WorkerEnvConfig(), **options) -> tuple[IsolatedEnvironment, EnvironmentProcesses]:
    processes = EnvironmentProcesses("worker-env")
    settings = {"workers": 1, "max_rss_mb": 0, "timeout_s": 20.0, **options}
    env = IsolatedEnvironment(WorkerEnv, config, {}, processes=processes, **settings)
    processes.at_close(env.shutdown)
    return env, processes


def test_calls_run_in_the_worker_and_state_travels():
    env, processes = _isolated()
    try:
        reset = env.reset({"id": 1}, 7)
        assert reset.state.state["pid"] != os.getpid() and reset.messages[0]["content"] == "hi"
        step = env.step(reset.state, _action("a move"))
        assert step.metrics["pid"] == reset.state.state["pid"] and step.state.state["turns"] == 1
        assert env.finish(step.state) == 1.0  # an async def, on the worker's own loop
        with pytest.raises(WorkerCallError, match="ValueError: no such move"):
            env.step(step.state, _action("raise"))
        with pytest.raises(WorkerCallError, match=r"SystemExit: 3"):  # never the trainer's exit
            env.step(step.state, _action("exit"))
        assert env.step(step.state, _action("again")).state.state["turns"] == 2  # the worker lives on
        env.close(step.state)
    finally:
        processes.close()
    assert not psutil.pid_exists(reset.state.state["pid"])


def test_a_hung_call_kills_its_worker_and_the_next_episode_gets_a_fresh_one():
    env, processes = _isolated(timeout_s=1.0)
    try:
        reset = env.reset({"id": 1}, 7)
        with pytest.raises(TimeoutError, match="ran longer than 1 s in its worker"):
            env.step(reset.state, _action("hang"))
        with pytest.raises(WorkerCallError, match="was killed: step ran past 1 s"):
            env.step(reset.state, _action("a move"))
        env.close(reset.state)
        again = env.reset({"id": 2}, 8)
        assert again.state.state["pid"] != reset.state.state["pid"]
        env.close(again.state)
    finally:
        processes.close()


def test_a_worker_over_its_memory_limit_is_replaced_once_its_episodes_are_closed():
    env, processes = _isolated(WorkerEnvConfig(keep_mb=80), max_rss_mb=60)
    try:
        first = env.reset({"id": 1}, 1)  # 80 MB kept: over the limit
        pid = first.state.state["pid"]
        second = env.reset({"id": 2}, 2)
        assert second.state.state["pid"] != pid  # the old worker takes no new episode
        assert env.step(first.state, _action("a move")).metrics["pid"] == pid  # but finishes its own
        assert psutil.pid_exists(pid)
        env.close(first.state)
        assert not psutil.pid_exists(pid)  # ended once its episode was closed
        env.close(second.state)
    finally:
        processes.close()


def test_an_episode_s_processes_in_a_worker_are_ended_with_the_episode():
    env, processes = _isolated(WorkerEnvConfig(sleep_s="61.25"))
    owner = object()
    pool = concurrent.futures.ThreadPoolExecutor(1)  # as the runner's environment threads
    try:
        reset = pool.submit(processes.on_thread(owner, env.reset), {"id": 1}, 1).result()
        sleeps = [c for c in psutil.Process(reset.state.state["pid"]).children() if "61.25" in c.cmdline()]
        assert len(sleeps) == 1
        pool.submit(processes.on_thread(owner, env.close), reset.state).result()
        assert processes.end(owner) == 1
        assert _dead(sleeps[0])
    finally:
        pool.shutdown()
        processes.close()


ISOLATED = """
[model]
name_or_path = "tiny-arithmetic"

[task]
name = "arithmetic"

[environment]
name = "{env}"
{options}

[renderer]
name = "tiny-chat"

[verifiers.non_stop_penalty]
all_rows = true
"""


def test_a_memory_limit_without_worker_processes_is_a_config_error(tmp_path, capsys):
    from grpo_run.cli.main import main

    cfg = tmp_path / "run.toml"
    cfg.write_text(ISOLATED.format(env="guess-a-digit", options="max_worker_rss_mb = 500"))
    assert main(["check", str(cfg)]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert ('environment.max_worker_rss_mb: limits environment worker processes: set environment.isolation = '
            '"process"') in err


def test_an_environment_that_drives_its_own_conversation_cannot_run_in_a_worker(tmp_path):
    from grpo_run.core.config.loading import load_config
    from grpo_run.core.errors import UserError
    from grpo_run.core.loop.build import isolated_environment
    from grpo_run.core.plugins.host import build_plugin_host

    registry = build_plugin_host().registry
    cfg = tmp_path / "run.toml"
    cfg.write_text(ISOLATED.format(env="support.worker_envs:DrivingEnv", options='isolation = "process"'))
    config = load_config(cfg, registry)
    with pytest.raises(UserError, match=r"drives its own conversation \(run_episode\).*use isolation = \"thread\""):
        isolated_environment(config, registry, EnvironmentProcesses("driving"))
