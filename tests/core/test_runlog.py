"""What libraries say during a run (Python warnings, records of their own loggers, including
loggers that print to stderr themselves as transformers' does) lands in ``log.jsonl``, and the
console shows only the run's own lines."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import warnings

from support.processes import subprocess_env
from support.runs import write_run

# A tracker named by import path: it warns while the run is built, and logs through three kinds
# of library logger at every step.
NOISY_TRACKER = '''
import logging
import sys
import warnings

import attrs

library = logging.getLogger("noisy_library")  # like transformers: its own stderr handler, no propagation
library.addHandler(logging.StreamHandler(sys.stderr))
library.propagate = False


@attrs.frozen
class NoisyConfig:
    pass


class NoisyTracker:
    name = "noisy"
    Config = NoisyConfig

    def __init__(self, config, run_dir):
        late = logging.getLogger("late_library")  # a library first imported while the run is built
        late.addHandler(logging.StreamHandler(sys.stderr))
        late.propagate = False
        warnings.warn("noisy-deprecation: call it differently", FutureWarning)

    def log(self, step, metrics):
        library.warning("noisy-library-record at step %d", step)
        logging.getLogger("late_library").warning("late-library-record at step %d", step)
        logging.getLogger("plain_library").warning("plain-library-record at step %d", step)

    def close(self):
        pass
'''


def test_library_warnings_and_logs_go_to_log_jsonl_not_the_console(tmp_path) -> None:
    (tmp_path / "noisy_tracker.py").write_text(NOISY_TRACKER)
    cfg = write_run(tmp_path, verifier="math", trackers={"noisy_tracker:NoisyTracker": {}},
                    logging={"progress": True})
    run = tmp_path / "run"
    env = subprocess_env()
    env["PYTHONPATH"] = f"{tmp_path}:{env['PYTHONPATH']}"
    done = subprocess.run([sys.executable, "-m", "grpo_run.cli.main", str(cfg), "--output-dir", str(run)],
                          capture_output=True, text=True, env=env, timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    console = done.stdout + done.stderr
    for text in ("noisy-deprecation", "FutureWarning", "library-record", "Warning:", "past_key_values"):
        assert text not in console, (text, console)
    assert "done after 2 steps" in console  # the run's own lines are still there
    events = [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines()]
    warned = [e for e in events if e["event"] == "library_warning"]
    noisy = [(e["category"], e["message"], e["where"]) for e in warned if "noisy" in e["message"]]
    assert noisy == [("FutureWarning", "noisy-deprecation: call it differently", f"{tmp_path}/noisy_tracker.py:26")]
    records = {(e["logger"], e["message"], e["level"]) for e in events if e["event"] == "library_log"}
    for step in (1, 2):
        assert {("noisy_library", f"noisy-library-record at step {step}", "warning"),
                ("late_library", f"late-library-record at step {step}", "warning"),
                ("plain_library", f"plain-library-record at step {step}", "warning")} <= records


def test_after_the_run_warnings_and_loggers_are_back_as_they_were(tmp_path) -> None:
    import structlog

    from grpo_run.core.runlog import LibraryOutput, configure_run_logging

    library = logging.getLogger("own_handler_library")
    console = logging.StreamHandler(sys.stderr)
    library.addHandler(console)
    shown = warnings.showwarning
    fh = configure_run_logging(tmp_path)
    output = LibraryOutput()
    output.start()
    try:
        assert console not in library.handlers and warnings.showwarning is not shown
    finally:
        output.stop()
        structlog.reset_defaults()  # as a run's close does: no later test logs into the closed file
        fh.close()
    assert library.handlers == [console] and warnings.showwarning is shown
    assert all(type(h).__name__ != "_ToRunLog" for h in logging.getLogger().handlers)


def test_a_logger_left_on_a_finished_runs_file_drops_its_events_instead_of_raising(tmp_path) -> None:
    """Code that logs after a run closed its log (here: a logger configured for it, the file then
    closed) must not fail with an I/O error; the closed file keeps what the run wrote."""
    import structlog

    from grpo_run.core.runlog import configure_run_logging, get_logger

    saved = structlog.get_config()
    try:
        log_file = configure_run_logging(tmp_path)
        get_logger().info("during_the_run")
        log_file.close()
        get_logger().info("after_the_run")  # raised "I/O operation on closed file" before
        log_file.flush()
    finally:
        structlog.configure(**saved)
    events = [json.loads(line)["event"] for line in (tmp_path / "log.jsonl").read_text().splitlines()]
    assert events == ["during_the_run"]
    assert log_file.failed is None
