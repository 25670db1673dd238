"""File systems that refuse a run's writes (docs/reliability.md): a read-only run directory or
``checkpoint.dir``, a disk full at start or filling up while the run writes rollout traces. Each
is one line and a non-zero exit, found before the first step where it can be, and leaves no
temporary file behind.

The read-only and full file systems are tmpfs mounts in a user and mount namespace of the
``grpo-run`` process alone (``unshare -Urm``), as the checkpoint full-disk test does: the real
disk is never filled.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from support.processes import subprocess_env
from support.runs import write_run
from support.verifiers import LENGTH_REWARD

pytestmark = pytest.mark.timeout(600)


@pytest.fixture(autouse=True)
def _namespaces() -> None:
    if subprocess.run(["unshare", "-Urm", "true"], capture_output=True).returncode != 0:
        pytest.skip("user namespaces are not available here")


def _config(tmp_path: Path, model_dir: Path, **sections) -> Path:
    sections = {"rollout": {"num_samples_per_prompt_rollout": 3, "response_length": 5}, **sections}
    return write_run(tmp_path, verifier=LENGTH_REWARD, train_rows=10, model={"name_or_path": str(model_dir)}, **sections)


AFTER = "----- after grpo-run -----"


def _grpo_run(setup: str, cfg: Path, run: Path) -> tuple[int, list[str], str, dict[str, str]]:
    """Run ``setup`` (mounts) then ``grpo-run CFG --output-dir RUN`` in a namespace of their own;
    (exit code, output lines without Python warnings, stderr, the files left under RUN with their
    text -- read inside the namespace, where the mounts are)."""
    show = (f'cd "{run}" 2>/dev/null && find . -type f | while read f; do echo "== $f"; cat "$f"; echo; done')
    script = (f'{setup} && "{sys.executable}" -m grpo_run.cli.main "{cfg}" --output-dir "{run}"; code=$?; '
              f'echo "{AFTER}"; ({show}); exit $code')
    done = subprocess.run(["unshare", "-Urm", "sh", "-c", script], capture_output=True, text=True,
                          env=subprocess_env(), timeout=300)
    stdout, _, left = done.stdout.partition(AFTER + "\n")
    files = {}
    for block in left.split("== ./")[1:]:
        name, _, text = block.partition("\n")
        files[name] = text[:-1]  # the echo after cat
    lines = [line for line in (stdout + done.stderr).splitlines()
             if line.strip() and "Warning" not in line and not line.startswith("  ")]
    return done.returncode, lines, done.stderr, files


def test_a_read_only_run_directory_is_one_line(tmp_path, tiny_model_dir) -> None:
    cfg = _config(tmp_path, tiny_model_dir)
    disk = tmp_path / "disk"
    disk.mkdir()
    run = disk / "run"
    code, lines, stderr, files = _grpo_run(f'mount -t tmpfs tmpfs "{disk}" && mount -o remount,ro "{disk}"', cfg, run)
    assert code == 2 and "Traceback" not in stderr
    assert lines == [f"error: cannot write the run directory {run}: read-only file system; choose a writable "
                     "directory (--output-dir, checkpoint.dir)"]


def test_a_read_only_checkpoint_dir_is_found_before_the_first_step(tmp_path, tiny_model_dir) -> None:
    disk = tmp_path / "disk"
    disk.mkdir()
    cfg = _config(tmp_path, tiny_model_dir, checkpoint={"dir": str(disk / "ckpts"), "save_freq": 1})
    run = tmp_path / "run"
    code, lines, stderr, files = _grpo_run(f'mount -t tmpfs tmpfs "{disk}" && mount -o remount,ro "{disk}"', cfg, run)
    assert code == 2 and "Traceback" not in stderr
    assert lines == [f"error: cannot write the checkpoints directory {disk / 'ckpts'}: read-only file system; "
                     "choose a writable directory (--output-dir, checkpoint.dir)"]
    assert "metrics.jsonl" not in files  # nothing trained


def test_a_full_disk_at_start_is_one_line_and_leaves_nothing(tmp_path, tiny_model_dir) -> None:
    cfg = _config(tmp_path, tiny_model_dir)
    disk = tmp_path / "disk"
    disk.mkdir()
    run = disk / "run"
    fill = f'(cat /dev/zero > "{disk}/filler" 2>/dev/null || true)'
    code, lines, stderr, files = _grpo_run(f'mount -t tmpfs -o size=64k tmpfs "{disk}" && {fill}', cfg, run)
    assert code == 1 and "Traceback" not in stderr
    assert lines == [f"run stopped: cannot write the run directory {run}: no space left on device "
                     "(0 B free on that file system)"]
    assert files == {}  # the directory it made is gone again


def test_a_disk_filling_up_with_rollout_traces_stops_in_one_line_without_temporary_files(tmp_path, tiny_model_dir) -> None:
    cfg = _config(tmp_path, tiny_model_dir, train={"total_steps": 200, "local_eval_every": 0},
                  rollout={"num_unique_prompts_rollout": 6, "num_samples_per_prompt_rollout": 8, "response_length": 12},
                  checkpoint={"save_freq": 0, "save_final": False}, logging={"progress": False, "log_rollouts_every": 1})
    disk = tmp_path / "disk"
    disk.mkdir()
    run = disk / "run"
    # The run's own files fit in 160 KiB for a few steps; a trace file of ~25 KiB per step fills it
    # (most often the trace write is refused first; sometimes the metrics line after it).
    code, lines, stderr, files = _grpo_run(f'mount -t tmpfs -o size=160k tmpfs "{disk}"', cfg, run)
    assert code == 1 and "Traceback" not in stderr
    lines = [line for line in lines if not re.match(r"step \d+/200 ", line)]  # the every-10-steps line
    assert lines[0] == f"grpo-run: run directory {run}"
    assert len(lines) == 2 and re.fullmatch(
        rf"run stopped: cannot write (rollout traces {run}/rollouts/step_\d+\.jsonl|the metrics file {run}/metrics\.jsonl): "
        r"no space left on device \(\d+ B free on that file system\)", lines[1]), lines[1]
    assert "metrics.jsonl" in files and [name for name in files if ".tmp" in name] == []
    metrics = files["metrics.jsonl"]
    assert metrics.endswith("}\n") and all(json.loads(line) for line in metrics.splitlines())  # no half line


def test_a_refused_trace_write_is_one_line_and_leaves_no_temporary_file(tmp_path, monkeypatch) -> None:
    import errno

    from grpo_run.core.errors import RunError
    from grpo_run.core.loop.traces import TraceWriter

    real_write = Path.write_text

    def half_then_full(self, text, *args, **kwargs):
        real_write(self, text[: len(text) // 2], *args, **kwargs)
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(Path, "write_text", half_then_full)
    writer = TraceWriter(tmp_path, every=1, max_bytes=1_000_000, decode=str)
    with pytest.raises(RunError) as caught:
        writer.write("train", 3, [])
    assert str(caught.value).startswith(f"cannot write rollout traces {tmp_path}/rollouts/step_3.jsonl: "
                                        "no space left on device (")
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["rollouts"]
