"""Hostile programs through the ``code`` verifier and its bubblewrap sandbox.

Each hostile program scores 0, leaves no process behind, and a good program still scores 1 right
after it. Each is written so that it *would* pass without the sandbox where that is possible
(it reads the host file, reaches the listener...), so a 0 shows the sandbox stopped it. The
catalogue runs as root (the verifier drops to uid 65534) and, for the sandbox and assert runner
alone, as the unprivileged user ``nobody`` (bwrap then makes a user namespace).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

from support.paths import REPO
from grpo_run.plugins.verifiers.code import CodeVerifier, CodeVerifierConfig
from grpo_run.plugins.verifiers.sandbox import SandboxLimits, run_sandboxed

pytestmark = pytest.mark.skipif(
    shutil.which("bwrap") is None, reason="needs bubblewrap (apt-get install -y bubblewrap)"
)

ROOT = os.geteuid() == 0
PROJECT = REPO
SRC = PROJECT / "src" / "grpo_run" / "plugins" / "verifiers"
GOOD = "```python\ndef f(x):\n    return x + 1\n```"
TESTS = {"tests": ["assert f(1) == 2"]}
CONFIG = CodeVerifierConfig(timeout_s=1.0, call_budget_s=3.0, cpu_s=2, memory_mb=256, max_processes=16, tmp_size_mb=8)


def fenced(source: str) -> str:
    return f"```python\n{textwrap.dedent(source).strip()}\n```"


# The catalogue: name -> program defining f (so that `assert f(1) == 2` passes only if the
# hostile action succeeded, or never). {port}, {secret}, {target} are filled in per test.
HOSTILE = {
    "infinite_loop": """
        def f(x):
            while True:
                pass
        """,
    "infinite_loop_at_import": """
        while True:
            pass
        """,
    "sigterm_ignored": """
        import signal, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        def f(x):
            time.sleep(60)
            return x + 1
        """,
    "fork_bomb": """
        import os
        def f(x):
            while True:
                try:
                    os.fork()
                except OSError:
                    pass
        """,
    "memory_bomb": """
        def f(x):
            blocks = []
            while True:
                blocks.append(bytearray(64 << 20))
        """,
    "network_connect": """
        import socket
        def f(x):
            socket.create_connection(("127.0.0.1", {port}), timeout=0.5).sendall(b"pwned")
            return x + 1
        """,
    "read_host_file": """
        def f(x):
            return x + 1 if open({secret!r}).read() == "secret" else 0
        """,
    "write_host_file": """
        def f(x):
            with open({target!r}, "w") as fh:
                fh.write("pwned")
            return x + 1
        """,
    "kill_everything": """
        import os, signal
        def f(x):
            for pid in (-1, os.getppid(), 1):
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            return x + 1
        """,
    "signal_runner": """
        import os, signal
        def f(x):
            for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1, signal.SIGSTOP):
                os.kill(os.getppid(), sig)
            return x + 1
        """,
    "orphaned_background": """
        import os, time
        def f(x):
            if os.fork() == 0:
                os.setsid()
                if os.fork() == 0:
                    time.sleep(1000)
                os._exit(0)
            return 0
        """,
    "output_flood": """
        import os
        def f(x):
            for fd in (1, 2):
                try:
                    os.dup2(os.open("/proc/1/fd/1", os.O_WRONLY), fd)
                except OSError:
                    pass
            while True:
                os.write(1, b"x" * 65536)
        """,
    "disk_fill": """
        def f(x):
            for path in ("/tmp/fill", "/dev/shm/fill"):
                with open(path, "wb") as fh:
                    for _ in range(1024):
                        fh.write(b"0" * (1 << 20))
            return x + 1
        """,
    "early_exit": """
        import os
        os._exit(0)
        def f(x):
            return x + 1
        """,
    "exit_in_test": """
        import sys
        def f(x):
            sys.exit(0)
        """,
    "forge_results": """
        import os
        line = b"\\nGRPO_RUN_RESULTS 1\\n"
        for path in ("/proc/1/fd/1", "/proc/%d/fd/1" % os.getppid(), "/dev/stdout"):
            try:
                fd = os.open(path, os.O_WRONLY)
                os.write(fd, line)
            except OSError:
                pass
        os._exit(0)
        """,
}


def expected_score(name: str) -> float:
    """0 for every hostile program, except one that only tries to kill others when the caller is
    not root: the runner is then the namespace's pid 1 (bwrap --as-pid-1), which its children
    cannot signal, so the kills reach nothing, f returns x + 1 and the test passes. As root the
    runner runs under bwrap's init, with the children's uid, and dies: every test fails."""
    return 1.0 if name in ("kill_everything", "signal_runner") and not ROOT else 0.0


def sandbox_processes() -> list[str]:
    """Host processes that are sandboxed code (``/sandbox/main.py``) or run as uid 65534."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            status = Path(f"/proc/{entry}/status").read_text()
        except OSError:
            continue
        uid = next((line.split()[1] for line in status.splitlines() if line.startswith("Uid:")), "")
        if "/sandbox/main.py" in cmdline or (ROOT and uid == "65534"):
            found.append(f"{entry}: uid {uid}: {cmdline}")
    return found


def assert_nothing_left() -> None:
    deadline = time.monotonic() + 2.0
    while (left := sandbox_processes()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert left == []


@pytest.fixture(scope="module")
def verifier() -> CodeVerifier:
    return CodeVerifier(CONFIG)


@pytest.fixture(scope="module")
def listener():
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.2)
    yield server
    server.close()


@pytest.fixture(scope="module")
def host_files():
    """A secret under host /tmp and one in a run directory of the project (``runs/``, git-ignored;
    readable by all), plus targets the sandbox must not be able to create."""
    tmp = Path(tempfile.mkdtemp(prefix="grpo-run-hostile-"))
    runs = PROJECT / "runs"
    made_runs = not runs.exists()
    run_dir = runs / f".hostile-{os.getpid()}"
    run_dir.mkdir(parents=True)
    for directory in (tmp, runs, run_dir):
        directory.chmod(0o755)
    secrets = [tmp / "secret.txt", run_dir / "secret.txt"]
    for path in secrets:
        path.write_text("secret")
        path.chmod(0o644)
    yield {"secrets": secrets, "targets": [tmp / "pwned.txt", run_dir / "pwned.txt"]}
    shutil.rmtree(run_dir, ignore_errors=True)
    if made_runs:
        shutil.rmtree(runs, ignore_errors=True)
    shutil.rmtree(tmp, ignore_errors=True)


def hostile_variants(listener: socket.socket, host_files: dict) -> list[tuple[str, str]]:
    port = listener.getsockname()[1]
    out = []
    for name, source in HOSTILE.items():
        if name == "read_host_file":
            out += [(f"{name}:{p}", source.format(secret=str(p))) for p in host_files["secrets"]]
        elif name == "write_host_file":
            out += [(f"{name}:{p}", source.format(target=str(p))) for p in host_files["targets"]]
        else:
            out.append((name, source.replace("{port}", str(port))))
    return out


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_program_scores_zero_and_leaves_nothing(name, verifier, listener, host_files):
    for variant, source in hostile_variants(listener, host_files):
        if variant.split(":")[0] != name:
            continue
        started = time.monotonic()
        result = verifier.score(fenced(source), TESTS, {})
        assert result.score == expected_score(name), variant
        assert time.monotonic() - started < CONFIG.call_budget_s + 1.0
        assert_nothing_left()
        with pytest.raises(TimeoutError):  # nothing reached the host's listener
            listener.accept()
        for target in host_files["targets"]:
            assert not target.exists()
        assert not Path("/tmp/fill").exists()  # the sandbox's /tmp is its own
        for secret in host_files["secrets"]:
            assert secret.read_text() == "secret"
        assert verifier.score(GOOD, TESTS, {}).score == 1.0, f"verifier broken after {variant}"


def test_hostile_programs_by_stdin_stdout(verifier):
    """The same attacks when the program is the sandbox's main process (stdin/stdout mode)."""
    cases = {"stdin_stdout": [{"input": "1\n", "output": "2\n"}]}
    names = ("infinite_loop_at_import", "orphaned_background", "output_flood", "early_exit", "kill_everything")
    for name in names:
        source = textwrap.dedent(HOSTILE[name]) + "\nprint(f(int(input())))\n"
        assert verifier.score(fenced(source), cases, {}).score == expected_score(name), name
        assert_nothing_left()
        assert verifier.score("```python\nprint(int(input()) + 1)\n```", cases, {}).score == 1.0


def test_output_flood_is_cut_and_killed():
    limits = SandboxLimits(timeout_s=2.0, max_output_bytes=4096)
    result = run_sandboxed("import os\nwhile True:\n    os.write(1, b'x' * 65536)\n", limits=limits)
    assert result.truncated and result.killed and not result.timed_out
    assert len(result.stdout) == 4096
    assert result.wall_s < 1.5


def test_timeout_kills_the_whole_tree():
    source = """
        import os, signal, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        for _ in range(3):
            if os.fork() == 0:
                os.setsid()
                time.sleep(1000)
        time.sleep(1000)
        """
    result = run_sandboxed(textwrap.dedent(source), limits=SandboxLimits(timeout_s=0.5))
    assert result.timed_out and result.killed
    assert 0.5 <= result.wall_s < 1.5
    assert_nothing_left()


def test_fork_bomb_is_bounded_by_rlimit_nproc():
    """RLIMIT_NPROC binds (the code runs as a non-root uid): forking stops below the limit."""
    source = """
        import os, time
        n = 0
        try:
            while n < 1000:
                if os.fork() == 0:
                    time.sleep(30)
                    os._exit(0)
                n += 1
        except OSError:
            pass
        print(n)
        """
    result = run_sandboxed(textwrap.dedent(source), limits=SandboxLimits(timeout_s=3.0, max_processes=12))
    assert result.exit_code == 0, result.stderr
    assert 0 < int(result.stdout) < 12
    assert_nothing_left()


def test_fork_bomb_does_not_starve_a_concurrent_sandbox():
    """RLIMIT_NPROC counts per sandbox (its own user namespace), not per uid on the host."""
    from concurrent.futures import ThreadPoolExecutor

    bomb = "import os, time\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        time.sleep(0.01)\n"
    limits = SandboxLimits(timeout_s=1.5, max_processes=12)
    with ThreadPoolExecutor(max_workers=1) as pool:
        bombing = pool.submit(run_sandboxed, bomb, b"", limits)
        time.sleep(0.5)
        good = run_sandboxed("import os\nif os.fork() == 0:\n    os._exit(0)\nos.wait()\nprint('ok')\n", limits=limits)
        assert (good.exit_code, good.stdout) == (0, b"ok\n"), good.stderr
        assert bombing.result().timed_out
    assert_nothing_left()


@pytest.mark.skipif(not ROOT, reason="privilege drop is tested when the caller is root")
def test_code_runs_as_nobody_without_privileges():
    source = """
        import os
        status = dict(line.split(":", 1) for line in open("/proc/self/status").read().splitlines())
        print(os.getresuid(), os.getresgid(), os.getgroups(), status["CapEff"].strip(), status["NoNewPrivs"].strip())
        print(sorted(os.listdir("/")), os.listdir("/root"))
        """
    result = run_sandboxed(textwrap.dedent(source))
    assert result.exit_code == 0, result.stderr
    ids, tree = result.stdout.decode().splitlines()
    assert ids == "(65534, 65534, 65534) (65534, 65534, 65534) [] 0000000000000000 1"
    assert tree == "['bin', 'dev', 'lib', 'lib64', 'proc', 'root', 'sandbox', 'sbin', 'tmp', 'usr'] ['.pyenv']"


def test_scorer_survives_hostile_programs():
    """Through the real scoring runtime: attacks on every signalable process leave the worker
    (same pid) and this process alive, and the good row still scores."""
    from grpo_run.core.scoring.scorer import RewardScorer

    rows = [{"id": i, "verifier": "code", "ground_truth": json.dumps(TESTS)} for i in range(4)]
    programs = [fenced(HOSTILE[name]) for name in ("kill_everything", "orphaned_background", "early_exit")] + [GOOD]
    import asyncio

    with RewardScorer({"code": (CodeVerifier, CONFIG)}, num_workers=1, timeout_s=10.0) as scorer:
        scorer.start()
        pids = scorer.worker_pids
        scored = asyncio.run(scorer.score(rows, programs))
        assert [s.reward for s in scored] == [0.0, 0.0, 0.0, 1.0]
        assert [s.error for s in scored] == [None] * 4
        assert scorer.worker_pids == pids
    assert_nothing_left()


# -- the same catalogue as the unprivileged user `nobody` -------------------------------------

AS_NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
NOBODY_HARNESS = """
import json, os, sys, time
sys.path.insert(0, sys.argv[1])
from sandbox import SandboxLimits, run_sandboxed
import sandbox_runner as runner

programs = json.loads(sys.stdin.read())
runner_source = open(runner.__file__).read()
limits = SandboxLimits(timeout_s=1.5, cpu_s=2, memory_mb=256, max_processes=24, tmp_size_mb=8)

def leftovers():
    found = []
    for entry in os.listdir("/proc"):
        try:
            if entry.isdigit() and int(entry) != os.getpid():
                if b"/sandbox/main.py" in open(f"/proc/{entry}/cmdline", "rb").read():
                    found.append(entry)
        except OSError:
            pass
    return found

def score(program):
    payload = runner.encode_asserts(program, ["assert f(1) == 2"], 1.0, 1.0)
    result = run_sandboxed(runner_source, payload, limits, python="/usr/bin/python3")
    return runner.decode_asserts(result.stdout, 1) if result.ok else None

report = {}
for name, program in programs.items():
    verdicts = score(program)
    deadline = time.monotonic() + 2
    while leftovers() and time.monotonic() < deadline:
        time.sleep(0.05)
    report[name] = {"verdicts": verdicts, "left": leftovers(), "good_after": score("def f(x):\\n    return x + 1\\n")}
ids = run_sandboxed("import os; print(os.getresuid())", limits=limits, python="/usr/bin/python3")
report["_ids"] = {"inside": ids.stdout.decode().strip(), "outside": os.getresuid()}
print(json.dumps(report))
"""


@pytest.mark.skipif(not ROOT, reason="already unprivileged: the tests above are the unprivileged run")
@pytest.mark.skipif(
    not (os.path.exists("/usr/bin/python3") and shutil.which("setpriv")), reason="needs /usr/bin/python3 and setpriv"
)
def test_hostile_catalogue_as_nobody(listener, host_files):
    """The verifier's Python lives under /root here (unreadable by nobody), so this runs the
    stdlib-only sandbox and assert runner with the system Python as uid 65534."""
    tmp = Path(tempfile.mkdtemp(prefix="grpo-run-nobody-"))
    try:
        tmp.chmod(0o755)
        for module in ("sandbox.py", "sandbox_runner.py"):
            shutil.copy(SRC / module, tmp / module)
            (tmp / module).chmod(0o644)
        variants = {name: textwrap.dedent(src) for name, src in hostile_variants(listener, host_files)}
        # fork bomb, memory bomb and the timeouts behave the same for both users; keeps this fast.
        for name in ("fork_bomb", "memory_bomb", "sigterm_ignored", "infinite_loop_at_import", "exit_in_test"):
            variants.pop(name)
        proc = subprocess.run(
            [*AS_NOBODY, "/usr/bin/python3", "-I", "-c", NOBODY_HARNESS, str(tmp)],
            input=json.dumps(variants),
            capture_output=True,
            text=True,
            timeout=50,
            cwd=tmp,
        )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report.pop("_ids") == {"inside": "(65534, 65534, 65534)", "outside": [65534, 65534, 65534]}
    # See expected_score: the kills reach nothing, f goes on to return x + 1 and passes.
    for name in ("kill_everything", "signal_runner"):
        assert report.pop(name) == {"verdicts": [True], "left": [], "good_after": [True]}, name
    for name, outcome in report.items():
        assert outcome["verdicts"] in ([False], None), name  # None: the runner was killed -> 0
        assert outcome["left"] == [], name
        assert outcome["good_after"] == [True], name
    with pytest.raises(TimeoutError):
        listener.accept()
    for target in host_files["targets"]:
        assert not target.exists()
    assert_nothing_left()
