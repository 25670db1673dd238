"""Environments that hang, run through ``grpo-run`` (issue 33, item 5; docs/reliability.md):

* an ``async def step`` that blocks the event loop is named, with how long it has held the loop,
  while it holds it;
* a first SIGTERM stops a run whose loop such a step holds for good: the last finished step is
  saved, exit 143, the resume line (it waited for a second signal, saving nothing); the same
  for a first Ctrl-C while an async verifier holds the loop;
* a synchronous ``step`` that never returns: its threads are replaced, the waiting line names the
  environment, and the run stops with a ``run stopped:`` line naming it when too many hang.

The environments and the tool come from an installed plugin distribution (``support.hostile_envs``);
the agent is a function given by import path, as agents are.
"""

from __future__ import annotations

import os
import re
import signal
import tomllib
from pathlib import Path

import pytest

from grpo_run.cli.main import main
from grpo_run.core.config.toml_writer import dumps_toml
from support import faulty_verifiers as faulty
from support.paths import EXAMPLES
from support.hostile_envs import install
from support.processes import run_grpo
from support.runs import agent_run, write_run

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(autouse=True)
def hanging_package(tmp_path, monkeypatch):
    """``grpo-run-hanging`` installed for the ``grpo-run`` subprocesses and the in-process runs."""
    root = install(tmp_path / "site")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")])))
    monkeypatch.syspath_prepend(str(root))


def _config(tmp_path: Path, env: str, total_steps: int = 2, tools: tuple[str, ...] = (), scoring: dict | None = None,
            **environment) -> Path:
    cfg = tomllib.loads((EXAMPLES / "calculator-tool.toml").read_text())
    cfg["scoring"] = scoring or {}
    cfg["tools"].update({tool: {} for tool in tools})
    cfg["environment"].update(name=env, **environment)
    cfg["rollout"].update(num_unique_prompts_rollout=2, num_samples_per_prompt_rollout=4, async_steps=1)
    cfg["train"].update(total_steps=total_steps, local_eval_every=0)
    cfg["train"].pop("stop_at_eval_accuracy")
    cfg["optim"]["warmup_steps"] = 1
    cfg["logging"] = {"progress": False, "report_waits_s": 1}
    path = tmp_path / "hostile.toml"
    path.write_text(dumps_toml(cfg), encoding="utf-8")
    return path


def test_a_step_blocking_the_loop_is_named_while_it_holds_it(tmp_path, monkeypatch):
    monkeypatch.setenv("HOSTILE_BAD_STEPS", "1")
    monkeypatch.setenv("HOSTILE_HOLD_S", "4")
    cfg = _config(tmp_path, "blocking-async-step", total_steps=1)
    done = run_grpo([str(cfg), "--output-dir", str(tmp_path / "run")], limit_s=120)

    assert done.returncode == 0 and "Traceback" not in done.output, done.output
    warning = next(i for i, line in enumerate(done.lines) if "has held the event loop" in line)
    assert re.search(r"environment 'blocking-async-step' step has held the event loop for "
                     r"[2-3] s: .*inside `async def`", done.lines[warning]), done.lines[warning]
    assert warning < done.lines.index("hold over")  # said while the loop was held, not after


def test_a_first_sigterm_stops_a_run_whose_loop_is_held_for_good(tmp_path, monkeypatch):
    monkeypatch.setenv("HOSTILE_FREE_STEPS", "16")  # step 1's episodes (8, at most 2 turns) behave
    cfg = _config(tmp_path, "blocking-async-step", total_steps=6)
    run = tmp_path / "run"
    done = run_grpo([str(cfg), "--output-dir", str(run)], when=lambda out: "has held the event loop" in out,
                    signals=[(signal.SIGTERM, 0.0)], limit_s=60)

    assert done.returncode == 143 and "Traceback" not in done.output and done.leftovers == [], done.output
    assert done.seconds_after_signal < 10  # it held the loop for an hour
    step = int(re.search(r"after step (\d+):", done.output).group(1))
    checkpoint = run / "checkpoints" / f"step_{step}"
    assert re.fullmatch(r"SIGTERM: environment 'blocking-async-step' step has held the "
                        r"event loop for \d+ s; stopping from outside the loop", done.lines[-3]), done.lines[-3]
    assert done.lines[-2:] == [
        f"interrupted by SIGTERM after step {step}: checkpoint {checkpoint}",
        f"resume with: grpo-run train {cfg} --output-dir {run} --resume {checkpoint}",
    ]
    assert step >= 1 and (checkpoint / "model.safetensors").exists()

    monkeypatch.setenv("HOSTILE_FREE_STEPS", str(10**9))  # the printed command goes on with the run
    assert main([str(cfg), "--output-dir", str(run), "--resume", str(checkpoint),
                 "--set", f"train.total_steps={step + 1}"]) == 0
    assert (run / "checkpoints" / f"step_{step + 1}" / "model.safetensors").exists()


def test_a_step_that_holds_the_loop_past_the_limit_stops_the_run_by_itself_saving_the_last_step(tmp_path,
                                                                                                 monkeypatch):
    """Nobody presses Ctrl-C: after train.max_loop_hold_s the run saves what it can, as on SIGTERM,
    says what held the loop and exits 1 (it warned every 10 s, for as long as nobody came)."""
    monkeypatch.setenv("HOSTILE_FREE_STEPS", "16")  # step 1's episodes (8, at most 2 turns) behave
    cfg = _config(tmp_path, "blocking-async-step", total_steps=6)
    text = cfg.read_text() + "\n"
    cfg.write_text(text.replace("[train]\n", "[train]\nmax_loop_hold_s = 3\n"), encoding="utf-8")
    run = tmp_path / "run"
    done = run_grpo([str(cfg), "--output-dir", str(run)], limit_s=90)

    assert done.returncode == 1 and "Traceback" not in done.output and done.leftovers == [], done.output
    stop = re.fullmatch(r"run stopped: environment 'blocking-async-step' step has held the event loop for more "
                        r"than train.max_loop_hold_s = 3 s: nothing else runs until it returns, .*; checkpoint "
                        r"(\S+)", done.lines[-2])
    assert stop, done.lines[-2]
    checkpoint = Path(stop.group(1))
    assert checkpoint.parent == run / "checkpoints" and (checkpoint / "model.safetensors").exists()
    assert done.lines[-1] == f"resume with: grpo-run train {cfg} --output-dir {run} --resume {checkpoint}"


def test_hung_sync_steps_are_replaced_then_stop_the_run_naming_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("HOSTILE_EVERY", "2")  # half the calls hang: the run goes on, some episodes succeed
    cfg = _config(tmp_path, "hanging-sync-step", total_steps=30, tools=("hanging-tool",), workers=2, step_timeout_s=1,
                  episode_timeout_s=60, scoring={"max_error_rate": 1.0})
    done = run_grpo([str(cfg), "--output-dir", str(tmp_path / "run")], limit_s=45)

    assert done.returncode == 1 and "Traceback" not in done.output, done.output
    assert any("still waiting" in line and "environment 'hanging-sync-step': " in line
               and "hung call(s) abandoned" in line for line in done.lines), done.output
    stop = re.fullmatch(r"run stopped: environment 'hanging-sync-step': (\d+) synchronous calls "
                        r"hang, still running 10 s after their environment.step_timeout_s = 1 \(step in tool "
                        r"'hanging-tool' (\d+)x; at most 2 may, .*\): .*", done.lines[-1])
    assert stop and stop.group(1) == stop.group(2), done.lines[-1]  # the calls named are those that hang


def test_a_first_ctrl_c_stops_a_run_whose_loop_an_async_verifier_holds(tmp_path, tiny_model_dir):
    """The same for an async verifier that blocks (a first Ctrl-C only queued its request)."""
    cfg = write_run(tmp_path, verifier=faulty.path(faulty.BlocksLoopLong), train_rows=12, eval_rows=3,
                    model={"name_or_path": str(tiny_model_dir)},
                    rollout={"num_samples_per_prompt_rollout": 3, "response_length": 5},
                    train={"total_steps": 6, "local_eval_every": 0}, scoring={"num_workers": 1, "timeout_s": 200})
    run = tmp_path / "run"
    done = run_grpo([str(cfg), "--output-dir", str(run)], when=lambda out: "has blocked the event loop" in out,
                    signals=[(signal.SIGINT, 0.0)], limit_s=60)

    assert done.returncode == 130 and "Traceback" not in done.output and done.leftovers == [], done.output
    assert done.seconds_after_signal < 10  # it holds the loop for 120 s
    assert re.fullmatch(r"SIGINT: async verifier '.*BlocksLoopLong' has held the event loop for \d+ s; "
                        r"stopping from outside the loop", done.lines[-3]), done.lines[-3]
    assert done.lines[-2:] == [
        "interrupted by SIGINT before the first step finished: nothing to save",
        f"start again with: grpo-run train {cfg} --output-dir {run} --overwrite",
    ]


def test_the_waiting_lines_of_a_hung_agent_name_it_and_say_it_is_in_its_own_code(tmp_path):
    """An agent awaiting something that never comes: the ``still waiting`` lines said only
    ``batch 1 generating``; now they name the agent's function and where its episodes are."""
    pytest.importorskip("openai")
    path, run = agent_run(tmp_path, "support.agent_envs:forever", logging={"report_waits_s": 1},
                          environment={"episode_timeout_s": 4})
    done = run_grpo([str(path), "--output-dir", str(run)], limit_s=90)

    assert done.returncode == 1 and "Traceback" not in done.output, done.output
    assert any(re.search(r"still waiting \(\d+ s without progress\): .*environment 'agent' \(support.agent_envs:forever\): "
                         r"8 episode\(s\) in run_episode, 8 of them in its own code \(not waiting for the policy\), "
                         r"the longest for \d+ s", line) for line in done.lines), done.output
    assert re.search(r"the environment's own time in the episode passed environment.episode_timeout_s = 4 \(4\.\d s "
                     r"of its own: 0\.\d s running its code, [34]\.\d s awaiting other things than the policy; not "
                     r"counted: \d+\.\d s waiting for the policy, \d+\.\d s for the busy event loop or a CPU\)",
                     done.lines[-1]), done.lines[-1]


def test_a_limit_below_what_can_be_measured_says_so(tmp_path, capsys):
    """A 0.05 s limit on an instant environment failed 1 of 128 episodes on thread scheduling alone."""
    cfg = _config(tmp_path, "blocking-async-step", episode_timeout_s=0.05)
    assert main(["check", str(cfg)]) == 0
    assert ("warning: environment.episode_timeout_s = 0.05 is below what can be measured (0.5 s): a loaded machine's "
            "thread scheduling adds that much to a call that returns at once, so episodes may fail for time that was "
            "not theirs") in " ".join(capsys.readouterr().err.split())


def test_a_first_sigterm_ends_an_agent_deadlocked_on_its_own_endpoint(tmp_path):
    """A synchronous HTTP client inside the agent's ``async def``: its request waits for the loop
    it holds. Named while it holds it; one SIGTERM ends the run (it took two, saving nothing)."""
    pytest.importorskip("openai")
    path, run = agent_run(tmp_path, "support.hostile_agents:sync_client", environment={"step_timeout_s": 5})
    done = run_grpo([str(path), "--output-dir", str(run)], when=lambda out: "has held the event loop" in out,
                    signals=[(signal.SIGTERM, 0.0)], limit_s=60)

    assert done.returncode == 143 and "Traceback" not in done.output and done.leftovers == [], done.output
    assert done.seconds_after_signal < 10
    assert any(line.startswith("warning: environment 'agent' run_episode has held the event loop for ")
               for line in done.lines), done.output
    assert re.fullmatch(r"SIGTERM: environment 'agent' run_episode has held the event loop for \d+ s; "
                        r"stopping from outside the loop", done.lines[-3]), done.lines[-3]
    assert done.lines[-2] == "interrupted by SIGTERM before the first step finished: nothing to save"
