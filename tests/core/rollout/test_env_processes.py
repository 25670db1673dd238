"""Processes environment code starts never outlive what started them: an installed environment
package whose constructor starts one ``sleep`` and whose every ``reset`` and ``step`` (plain and
``async def``) starts more, run by ``grpo-run`` to its end and stopped by SIGTERM. The trainer's
own children (the scoring workers here) are never touched. The memory it keeps is said."""

from __future__ import annotations

import os
import random
import signal
import json
import re
import subprocess
import threading
import time

import psutil
import pytest

from grpo_run.core.rollout.env_processes import ENVIRONMENT, EnvironmentProcesses, EpisodeOwner
from support.distributions import install_module
from support.processes import metrics_steps, run_grpo

pytestmark = pytest.mark.timeout(240)

SPAWNER = '''
import asyncio
import subprocess

import attrs
import grpo_run

SECONDS = "{seconds}"
KEPT = []


@attrs.frozen
class Config:
    pass


class Spawner:
    """Starts `sleep` children and never ends them: one at construction, one per reset and step.
    Keeps 40 MB per episode for good."""

    name = "spawner"
    Config = Config
    KEEP_MB = 40

    def __init__(self, config, tools):
        self.server = subprocess.Popen(["sleep", SECONDS])  # meant to serve the whole run

    def reset(self, row, seed):
        KEPT.append(b"x" * (self.KEEP_MB << 20))
        subprocess.Popen(["sh", "-c", f"sleep {{SECONDS}}; true"])  # a tree: sh and its sleep
        return grpo_run.EnvReset([{{"role": "user", "content": "1+1"}}])

    def step(self, state, action):
        subprocess.Popen(["sleep", SECONDS])
        assert self.server.poll() is None, "the environment's own process was ended mid-run"
        return grpo_run.EnvStep([{{"role": "user", "content": "again"}}], reward=0.1 * len(action.turn.text))


class AsyncSpawner(Spawner):
    name = "async-spawner"
    KEEP_MB = 0

    async def step(self, state, action):
        await asyncio.create_subprocess_exec("sleep", SECONDS)
        return grpo_run.EnvStep([{{"role": "user", "content": "again"}}], reward=0.1 * len(action.turn.text))


@grpo_run.hookimpl
def grpo_run_register_environments(register):
    register(Spawner)
    register(AsyncSpawner)
'''

CONFIG = """
[run]
seed = 1

[model]
name_or_path = "tiny-arithmetic"

[task]
name = "arithmetic"
num_eval = 0

[data]
max_prompt_token_length = 16

[rollout]
num_unique_prompts_rollout = 2
num_samples_per_prompt_rollout = 4
response_length = 24

[environment]
name = "{env}"
max_turns = 3
max_tokens_per_turn = 4

[renderer]
name = "tiny-chat"

[scoring]
row_verifiers = false
num_workers = 1

[verifiers.non_stop_penalty]
all_rows = true

[train]
total_steps = {steps}
local_eval_every = 0

[checkpoint]
save_freq = 0

[logging]
progress = false
"""


def _install(root, seconds: str) -> None:
    """The package, installed as pip would (a module and its .dist-info on the path)."""
    install_module(root, "spawner_env", SPAWNER.format(seconds=seconds), "grpo-run-spawner", "spawner")


def _sleeps(seconds: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        if proc.info["cmdline"] and proc.info["cmdline"][-1].endswith(seconds) and \
                proc.info["status"] != psutil.STATUS_ZOMBIE:
            found.append(proc)
    return found


@pytest.fixture
def package(tmp_path, monkeypatch):
    seconds = f"{random.randrange(10_000, 99_999)}.{os.getpid() % 1000}"  # names this test's sleeps
    root = tmp_path / "site"
    root.mkdir()
    _install(root, seconds)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")])))
    yield seconds
    for proc in _sleeps(seconds):  # whatever a failing run left
        proc.kill()


def test_no_process_an_environment_starts_outlives_the_run(tmp_path, package):
    env = "spawner"
    cfg = tmp_path / "run.toml"
    cfg.write_text(CONFIG.format(env=env, steps=2))
    done = run_grpo([str(cfg), "--output-dir", str(tmp_path / "run")], settle_s=3.0)
    assert done.returncode == 0, done.output
    assert "Traceback" not in done.output
    assert not done.leftovers, done.leftovers
    assert not _sleeps(package)
    flat = " ".join(done.output.split())
    assert f"warning: environment '{env}' left" in flat and "ended them" in flat
    assert flat.count(f"environment '{env}' left") == 1  # said once
    # 8 episodes x 40 MB a step, kept: said past 256 MB, as it happens. (How much of it is counted
    # depends on how the 4 threads' calls overlap -- 360 to 650 MB seen -- so a second line past
    # 512 MB is not asserted here; the doubling is, in test_memory_growth_is_said_past_256_mb_then_at_each_doubling.)
    grown = [int(mb) for mb in re.findall(r"the trainer's memory grew by (\d+) MB while environment 'spawner'", flat)]
    assert grown and 256 <= grown[0] and grown == sorted(grown), flat
    events = [json.loads(line)["event"] for line in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    said = [e for e in events if e in ("environment_memory", "step")]
    # said while it happens: before the run's last step ended, not in a summary after it (where the
    # first line falls depends on the trainer's resident peak before the first episode: torch builds differ)
    last_step = max(i for i, e in enumerate(said) if e == "step")
    assert said.count("step") == 2 and said[:last_step].count("environment_memory") >= 1, said
    metrics = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [m["env/error_rate"] for m in metrics] == [0.0, 0.0]  # its own process lived through every step


def test_no_process_an_async_environment_starts_outlives_a_sigterm(tmp_path, package):
    cfg = tmp_path / "run.toml"
    cfg.write_text(CONFIG.format(env="async-spawner", steps=50))
    run = tmp_path / "run"
    done = run_grpo([str(cfg), "--output-dir", str(run)], signals=[(signal.SIGTERM, 0.0)],
                    when=lambda _: len(metrics_steps(run)) >= 1, settle_s=3.0)
    assert done.returncode == 143, done.output
    assert not done.leftovers, done.leftovers
    assert not _sleeps(package)


def test_no_process_an_environment_starts_outlives_a_sigkill_of_the_trainer(tmp_path, package):
    """No clean-up code runs under SIGKILL: the reaper the trainer started ends the environment's
    own process (started in its constructor) and every episode's it knew of, then exits."""
    cfg = tmp_path / "run.toml"
    cfg.write_text(CONFIG.format(env="spawner", steps=50))
    run = tmp_path / "run"
    seen: list[int] = []

    def running(_: str) -> bool:
        seen[:] = [p.pid for p in _sleeps(package)]
        return len(metrics_steps(run)) >= 1 and bool(seen)

    done = run_grpo([str(cfg), "--output-dir", str(run)], signals=[(signal.SIGKILL, 0.0)], when=running, settle_s=5.0)
    assert done.returncode == -signal.SIGKILL, done.output
    assert seen  # the environment's processes were running when the trainer was killed
    assert not done.leftovers, done.leftovers  # the reaper too is gone
    assert not _sleeps(package)


def test_an_environment_in_worker_processes_keeps_its_memory_there_under_a_limit(tmp_path, package):
    """``isolation = "process"``: the 40 MB each episode keeps stay in the workers, which are
    replaced past ``max_worker_rss_mb`` once their open episodes are closed; nothing is left."""
    cfg = tmp_path / "run.toml"
    cfg.write_text(CONFIG.format(env="spawner", steps=2).replace(
        'max_turns = 3', 'max_turns = 3\nisolation = "process"\nmax_worker_rss_mb = 150\nworkers = 2'))
    run = tmp_path / "run"
    done = run_grpo([str(cfg), "--output-dir", str(run)], settle_s=3.0)
    assert done.returncode == 0, done.output
    assert not done.leftovers, done.leftovers
    assert not _sleeps(package)
    flat = " ".join(done.output.split())
    assert "over environment.max_worker_rss_mb = 150; it takes no new episode" in flat, flat
    assert "the trainer's memory grew" not in flat  # the memory was the workers'
    assert "environment 'spawner' left" in flat  # an episode's processes are still ended with it
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [m["env/error_rate"] for m in metrics] == [0.0, 0.0]
    events = [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines()]
    assert sum(e["event"] == "environment_worker_replaced" for e in events) >= 2


# -- the tracker on its own: only what environment code started is ended ------------------------


def _ended(child: subprocess.Popen) -> bool:
    """Killed and reaped (by the tracker: ``Popen.wait`` then reads no status of its own)."""
    child.wait(5)
    return not psutil.pid_exists(child.pid)


def test_only_the_children_of_environment_calls_are_ended():
    processes = EnvironmentProcesses("spawner")
    ours = subprocess.Popen(["sleep", "60"])  # the trainer's own child (a scoring worker, say)
    try:
        with processes.constructing():
            server = subprocess.Popen(["sleep", "60"])
        episode = EpisodeOwner()
        started: list[subprocess.Popen] = []
        worker = threading.Thread(target=processes.on_thread(episode, lambda: started.append(
            subprocess.Popen(["sleep", "60"]))))
        worker.start()
        worker.join()
        assert processes.end(episode) == 1
        assert _ended(started[0])
        assert server.poll() is None and ours.poll() is None  # the environment's lives on until close
        assert processes.close() == 1
        assert _ended(server)
        assert ours.poll() is None and processes.ended == 2
        assert processes.end(ENVIRONMENT) == 0
    finally:
        ours.kill()
        ours.wait()


def test_a_call_that_never_returned_has_its_children_ended_at_close():
    processes = EnvironmentProcesses("hung")
    release = threading.Event()
    children: list[subprocess.Popen] = []

    def hung() -> None:
        children.append(subprocess.Popen(["sleep", "60"]))
        release.wait(30)

    worker = threading.Thread(target=processes.on_thread(object(), hung), daemon=True)
    worker.start()
    deadline = time.monotonic() + 10
    while not children and time.monotonic() < deadline:
        time.sleep(0.01)
    assert processes.close() == 1
    assert _ended(children[0])
    release.set()
    worker.join(5)


def test_a_call_that_returns_after_its_episode_ended_has_its_children_ended_at_once():
    processes = EnvironmentProcesses("late")
    episode, release = EpisodeOwner(), threading.Event()
    children: list[subprocess.Popen] = []

    def late() -> None:
        release.wait(30)
        children.append(subprocess.Popen(["sleep", "60"]))

    worker = threading.Thread(target=processes.on_thread(episode, late))
    worker.start()
    assert processes.end(episode) == 0  # the episode timed out; its call runs on
    release.set()
    worker.join(10)
    assert _ended(children[0]) and processes.ended == 1


def test_a_child_of_overlapping_async_calls_lives_until_every_one_of_their_episodes_ended():
    """Async calls of two episodes overlap on the event loop's thread: a child that appeared
    while both were open may be either's, so it is ended only when both episodes are over."""
    processes = EnvironmentProcesses("async")
    a, b = EpisodeOwner(), EpisodeOwner()
    with processes.watching(a):
        with processes.watching(b):
            child = subprocess.Popen(["sleep", "60"])
        assert processes.end(b) == 0 and child.poll() is None  # b's call closed first: a may need it
        alone = subprocess.Popen(["sleep", "60"])  # appeared while only a's call was open
    assert processes.end(a) == 2
    assert _ended(child) and _ended(alone)


def test_a_child_an_exiting_thread_hands_over_during_an_async_call_is_not_the_episode_s():
    """Linux moves the children of a thread that exits to another thread of the process (here the
    event loop's): one older than the call is the trainer's (say a scoring thread's), never ended."""
    processes = EnvironmentProcesses("async")
    release, started = threading.Event(), []

    def scoring_thread() -> None:
        started.append(subprocess.Popen(["sleep", "60"]))
        release.wait(30)

    thread = threading.Thread(target=scoring_thread)
    thread.start()
    while not started:
        time.sleep(0.01)
    time.sleep(0.1)
    episode = EpisodeOwner()
    try:
        with processes.watching(episode):
            release.set()
            thread.join(10)
            time.sleep(0.1)
        assert processes.end(episode) == 0 and started[0].poll() is None
    finally:
        started[0].kill()
        started[0].wait()


def test_memory_growth_is_said_past_256_mb_then_at_each_doubling() -> None:
    """Only growth above every resident size seen before counts; said past 256 MB, 512, 1024."""
    from grpo_run.core.rollout.env_processes import EnvironmentProcesses

    said: list[str] = []
    processes = EnvironmentProcesses("grower")
    processes.warn = said.append
    mb = 1 << 20
    try:
        base = 1000 * mb
        processes._grew(base, base + 200 * mb)  # 200 MB: not yet
        processes._grew(base, base + 150 * mb)  # below the peak seen: nothing counts
        assert processes.grown_bytes == 200 * mb and not said
        processes._grew(base + 200 * mb, base + 300 * mb)  # 300 MB: said
        processes._grew(base + 300 * mb, base + 400 * mb)  # 400: not again
        processes._grew(base + 400 * mb, base + 1100 * mb)  # 1100: past 512 and 1024 at once, said once
        grown = [int(re.search(r"grew by (\d+) MB", line).group(1)) for line in said]
        assert grown == [300, 1100]
    finally:
        processes.close()

