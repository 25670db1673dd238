"""Agent code under load, run through ``grpo-run`` (docs/reliability.md, "Agent episodes under
load"): a flood of requests never exhausts the trainer's open files, and a first Ctrl-C ends a
run whose agents are slow to let go, saving the last finished step."""

from __future__ import annotations

import json
import re
import signal

import pytest

from support.processes import cpu_load, run_grpo
from support.runs import agent_run

pytest.importorskip("openai")
pytest.importorskip("uvicorn")
pytestmark = pytest.mark.timeout(300)


def test_a_flood_of_requests_from_every_episode_stays_within_the_open_file_limit(tmp_path, monkeypatch):
    """4 episodes x 150 requests at once under an open-file limit of 1024: the agents' own ends of
    their connections take 600 of the trainer's files. The endpoint held one file per connection
    as long as the client kept it (keep-alive through the retries of its 429s) and accepted past
    the limit: `socket.accept() out of system resource`, requests unanswered."""
    monkeypatch.setenv("FLOOD_N", "150")
    monkeypatch.setenv("FLOOD_OUT", str(tmp_path / "flood.jsonl"))
    path, run = agent_run(tmp_path, "support.hostile_agents:flood", train={"total_steps": 1},
                          rollout={"num_unique_prompts_rollout": 1})
    done = run_grpo([str(path), "--output-dir", str(run)], open_files=1024, limit_s=240)

    assert done.returncode == 0 and "Traceback" not in done.output, done.output
    assert "out of system resource" not in (run / "log.jsonl").read_text()
    episodes = [json.loads(line) for line in (tmp_path / "flood.jsonl").read_text().splitlines()]
    assert len(episodes) == 4 and all(e == {"answered": 150, "errors": {}} for e in episodes), episodes


def test_a_first_ctrl_c_ends_a_run_whose_agents_are_slow_to_let_go_saving_the_last_step(tmp_path, monkeypatch):
    """Step 1's episodes behave; step 2's agents ignore cancellation for a minute in their clean-up
    (as unwinding thousands of requests does). The first Ctrl-C waited for them, and a second one
    saved nothing."""
    monkeypatch.setenv("STUBBORN_FREE", "8")
    path, run = agent_run(tmp_path, "support.hostile_agents:stubborn", train={"total_steps": 3},
                          logging={"report_waits_s": 1})
    done = run_grpo([str(path), "--output-dir", str(run)], limit_s=120, signals=[(signal.SIGINT, 0.0)],
                    when=lambda out: "an agent holds on" in out)

    assert done.returncode == 130 and "Traceback" not in done.output and done.leftovers == [], done.output
    assert done.seconds_after_signal < 30  # the agents hold on for 60 s
    assert "SIGINT: the run is still stopping 10 s after it (its event loop is busy); stopping from outside the loop" \
        in done.lines, done.output
    checkpoint = run / "checkpoints" / "step_1"
    assert done.lines[-2:] == [
        f"interrupted by SIGINT after step 1: checkpoint {checkpoint}",
        f"resume with: grpo-run train {path} --output-dir {run} --resume {checkpoint}",
    ]
    assert (checkpoint / "model.safetensors").exists()


@pytest.mark.parametrize("function", ["ok", "three_calls"])
def test_128_agents_at_once_on_a_loaded_machine_are_charged_only_their_own_time(tmp_path, function):
    """16 x 8 episodes at once, each one to three model calls through a fresh ``AsyncOpenAI``
    client, ``episode_timeout_s = 3``, while three processes keep the CPUs busy. Every episode
    failed ("11.5 s in its calls and code"): the time each agent's coroutine waited for the event
    loop (the other agents building their clients, the HTTP handling of its own calls) was
    charged to it."""
    path, run = agent_run(tmp_path, f"support.hostile_agents:{function}", train={"total_steps": 1},
                          rollout={"num_unique_prompts_rollout": 16, "num_samples_per_prompt_rollout": 8},
                          environment={"episode_timeout_s": 3, "max_turns": 3})
    with cpu_load(3):
        done = run_grpo([str(path), "--output-dir", str(run)], limit_s=280)

    assert done.returncode == 0 and "Traceback" not in done.output, done.output
    metrics = json.loads((run / "metrics.jsonl").read_text().splitlines()[-1])
    assert metrics["env/episodes"] == 128 and metrics["env/timeout_rate"] == 0 and metrics["env/error_rate"] == 0
    assert metrics["env/env_s"] / 128 < 1.5  # its own time per episode, on average


def test_holds_of_the_event_loop_each_under_the_limit_stop_the_run_once_a_step_adds_up_to_it(tmp_path, monkeypatch):
    """Each of 8 episodes holds the loop for 2 s, under ``train.max_loop_hold_s = 5``: each hold
    was named and none stopped, so such an agent held a step for 16 s (60 s holds: 16 minutes)."""
    monkeypatch.setenv("HOLD_S", "2")
    path, run = agent_run(tmp_path, "support.hostile_agents:holds_the_loop", train={"max_loop_hold_s": 5})
    done = run_grpo([str(path), "--output-dir", str(run)], limit_s=120)

    assert done.returncode == 1 and "Traceback" not in done.output, done.output
    stop = next(line for line in done.lines if line.startswith("run stopped:"))
    assert re.fullmatch(r"run stopped: code has held the event loop for [5-7] s in total since step 0 \(3 holds, the "
                        r"longest [23] s: environment 'agent' run_episode 3x\), more than train.max_loop_hold_s = 5 s: "
                        r"nothing else runs while it does \(a blocking call inside `async def`: await an async one, or "
                        r"make it a plain def\); nothing to save \(no step finished\)", stop), stop


def test_a_connection_past_the_endpoints_cap_is_answered_429_at_once(tmp_path, monkeypatch):
    """Each episode first holds ``CROWD = 4`` connections with half a request, against
    ``environment.max_connections = 4``: its next request is past the cap. Such connections waited
    in the kernel's queue until a place came free (here: never, so the client's 10 s timeout);
    now they are answered 429 at once, which OpenAI clients retry."""
    out = tmp_path / "crowd.jsonl"
    monkeypatch.setenv("CROWD", "4")
    monkeypatch.setenv("CROWD_OUT", str(out))
    path, run = agent_run(tmp_path, "support.hostile_agents:crowded", train={"total_steps": 1},
                          environment={"max_connections": 4})
    done = run_grpo([str(path), "--output-dir", str(run)], limit_s=150)

    assert done.returncode == 0 and "Traceback" not in done.output, done.output
    firsts = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(firsts) == 8 and {f["first"] for f in firsts} == {"RateLimitError"}, firsts
    assert max(f["seconds"] for f in firsts) < 5, firsts
