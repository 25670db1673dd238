"""The trusted runner of the ``code`` verifier, executed *inside* the sandbox, once per program.

It runs every test of one program in one sandbox: a child per test, forked from this process,
which itself never executes untrusted code. Two modes, chosen by the payload on stdin
(:func:`encode_asserts` / :func:`encode_cases`, host side):

* **asserts**: each child runs the program, then one assert. It passes only when the child,
  *after* the assert returned, reads a fresh random token from a pipe and sends it back, so an
  ``os._exit(0)``/``sys.exit(0)`` in the program, a crash, a hang or a kill fails that test
  (and only that one). An exit status could be forged; the token is not in memory to be found.
* **cases** (stdin/stdout): each child runs the program as ``__main__`` with the case's input
  on stdin and its stdout on a pipe read here (bounded); its exit status is reported as a fresh
  interpreter's would be (``SystemExit`` codes, 1 on an uncaught exception).

After each test every process this one can signal is SIGKILLed (orphans, daemons, fork bombs),
so no test runs beside the leftovers of another. This process makes itself non-dumpable, so
children of the same uid cannot use its fds or memory (``/proc/<pid>/fd``, ptrace); children get
``/dev/null`` for the stdio they should not have, so this process alone writes the sandbox's
stdout: one report (:func:`decode_asserts` / :func:`decode_cases`). If a child kills it, the
report is missing and the host fails every test (it also requires exit status 0).

Standard library only, and only modules that are cheap to import (no ``json``/``re``).
"""

import marshal
import os
import select
import signal
import sys
import time

RESULT_PREFIX = b"GRPO_RUN_RESULTS "
_IN_OWN_PID_NAMESPACE = os.getpid() <= 2
"""The runner is pid 1 (bwrap --as-pid-1) or 2 (under bwrap's init) only in a new pid namespace."""
_FORK_RETRY_S = 0.5  # zombies of the previous test may still count against RLIMIT_NPROC
_FAILED_TO_START = -1000
"""Case status when no child could be forked."""


# -- host side: the protocol ----------------------------------------------------------------


def encode_asserts(program: str, tests: list, test_timeout_s: float, total_timeout_s: float) -> bytes:
    """Payload running ``program`` + each assert of ``tests``."""
    return marshal.dumps(("asserts", str(program), [str(t) for t in tests], float(test_timeout_s), float(total_timeout_s), 0))


def encode_cases(program: str, inputs: list, test_timeout_s: float, total_timeout_s: float, max_output: int) -> bytes:
    """Payload running ``program`` once per stdin text of ``inputs``, keeping ``max_output`` bytes."""
    return marshal.dumps(("cases", str(program), [str(i) for i in inputs], float(test_timeout_s), float(total_timeout_s), int(max_output)))


def decode_asserts(stdout: bytes, count: int):
    """Pass/fail per assert, or None when ``stdout`` is not exactly the runner's report."""
    if not stdout.startswith(RESULT_PREFIX) or not stdout.endswith(b"\n"):
        return None
    digits = stdout[len(RESULT_PREFIX) : -1]
    if len(digits) != count or digits.strip(b"01"):
        return None
    return [d == ord("1") for d in digits]


def decode_cases(stdout: bytes, count: int):
    """``(exit status, timed out, output truncated, stdout)`` per case, or None when ``stdout`` is
    not exactly the runner's report."""
    header = RESULT_PREFIX + b"%d\n" % count
    if not stdout.startswith(header):
        return None
    pos, cases = len(header), []
    try:
        for _ in range(count):
            end = stdout.index(b"\n", pos, pos + 64)
            status, timed_out, truncated, size = (int(x) for x in stdout[pos:end].split(b" "))
            output = stdout[end + 1 : end + 1 + size]
            if len(output) != size:
                return None
            cases.append((status, timed_out == 1, truncated == 1, output))
            pos = end + 1 + size
    except ValueError:
        return None
    return cases if pos == len(stdout) else None


# -- sandbox side ----------------------------------------------------------------------------


def _make_undumpable() -> None:
    import ctypes

    pr_set_dumpable = 4
    if ctypes.CDLL(None, use_errno=True).prctl(pr_set_dumpable, 0, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE, 0) failed")


def _fresh_module(name: str):
    """An empty module registered as ``name``, with ``exit``/``quit`` available as in a normal
    interpreter (they come from ``site``, which ``-S`` skips)."""
    import builtins

    builtins.exit = builtins.quit = sys.exit
    module = type(sys)(name)
    sys.modules[name] = module
    return module


def _assert_child(program: str, test: str, token_fd: int, result_fd: int) -> None:
    """Untrusted from the first exec on; never returns."""
    try:
        devnull = os.open("/dev/null", os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(devnull, fd)
        module = _fresh_module("solution")
        exec(compile(program, "<program>", "exec"), module.__dict__)
        exec(compile(test, "<test>", "exec"), module.__dict__)
        os.write(result_fd, os.read(token_fd, 64))
    except BaseException:
        os._exit(1)
    os._exit(0)


def _case_child(program: str, stdin_fd: int, stdout_fd: int) -> None:
    """Run ``program`` as a script would run; exit with the status the interpreter would give."""
    status = 1
    try:
        devnull = os.open("/dev/null", os.O_WRONLY)
        for src, fd in ((stdin_fd, 0), (stdout_fd, 1), (devnull, 2)):
            os.dup2(src, fd)
            os.close(src)
        sys.stdin = open(0, encoding="utf-8", closefd=False)
        sys.stdout = open(1, "w", encoding="utf-8", closefd=False)
        sys.stderr = open(2, "w", encoding="utf-8", closefd=False)
        sys.argv = ["/sandbox/main.py"]
        module = _fresh_module("__main__")
        module.__file__ = "/sandbox/main.py"
        try:
            exec(compile(program, "/sandbox/main.py", "exec"), module.__dict__)
            status = 0
        except SystemExit as exc:
            status = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except BaseException:
            status = 1
        try:
            if "threading" in sys.modules:
                sys.modules["threading"]._shutdown()  # join non-daemon threads, as at exit
            import atexit

            atexit._run_exitfuncs()
            sys.stdout.flush()
        except BaseException:
            status = status or 1
    finally:
        os._exit(status % 256)


def _fork() -> int:
    give_up = time.monotonic() + _FORK_RETRY_S
    while True:
        try:
            return os.fork()
        except BlockingIOError:
            if time.monotonic() > give_up:
                raise
            time.sleep(0.01)


def _start(child, *args) -> int:
    """Fork a child in its own process group running ``child(*args)``; -1 when forking fails."""
    try:
        pid = _fork()
    except OSError:
        return -1
    if pid == 0:
        os.setpgid(0, 0)
        child(*args)
    try:
        os.setpgid(pid, pid)  # also here: the child may not have run yet when we kill its group
    except OSError:
        pass
    return pid


def _pidfd(pid: int):
    try:
        return os.pidfd_open(pid)
    except OSError:  # already gone
        return None


def _read_available(fd: int, limit: int) -> bytes:
    """What is in the pipe now, up to ``limit`` bytes (the writer has exited)."""
    os.set_blocking(fd, False)
    data = b""
    try:
        while len(data) <= limit:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            data += chunk
    except BlockingIOError:
        pass
    return data


def _run_assert(program: str, test: str, timeout_s: float) -> bool:
    token = os.urandom(16).hex().encode()
    token_r, token_w = os.pipe()
    result_r, result_w = os.pipe()
    os.write(token_w, token)
    os.close(token_w)
    pid = _start(_assert_child, program, test, token_r, result_w)
    os.close(token_r)
    os.close(result_w)
    if pid < 0:
        os.close(result_r)
        return False
    pidfd = _pidfd(pid)
    got = b""
    deadline = time.monotonic() + timeout_s
    try:
        while len(got) < len(token):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            ready, _, _ = select.select([result_r] if pidfd is None else [result_r, pidfd], [], [], remaining)
            if result_r in ready:
                chunk = os.read(result_r, 64)
                if not chunk:
                    break
                got += chunk
            elif pidfd in ready:  # exited; take what it wrote before
                got += _read_available(result_r, 64)
                break
    finally:
        os.close(result_r)
        if pidfd is not None:
            os.close(pidfd)
        _kill_everything_else(pid)
    return got == token


def _run_case(program: str, stdin_text: str, timeout_s: float, max_output: int):
    """``(status, timed_out, truncated, stdout)`` of one run."""
    stdin_fd = os.memfd_create("stdin", 0)
    data = memoryview(stdin_text.encode("utf-8"))
    while data:
        data = data[os.write(stdin_fd, data) :]
    os.lseek(stdin_fd, 0, os.SEEK_SET)
    out_r, out_w = os.pipe()
    pid = _start(_case_child, program, stdin_fd, out_w)
    os.close(stdin_fd)
    os.close(out_w)
    if pid < 0:
        os.close(out_r)
        return _FAILED_TO_START, False, False, b""
    pidfd = _pidfd(pid)
    output = b""
    timed_out = truncated = False
    watched = [out_r] if pidfd is None else [out_r, pidfd]
    deadline = time.monotonic() + timeout_s
    try:
        while watched:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                timed_out = True
                break
            ready, _, _ = select.select(watched, [], [], remaining)
            if out_r in ready:
                chunk = os.read(out_r, 65536)
                if not chunk:
                    watched.remove(out_r)  # EOF: now wait for the exit
                output += chunk
            elif pidfd in ready:
                if out_r in watched:
                    output += _read_available(out_r, max_output)
                break
            if len(output) > max_output:
                truncated = True
                break
    finally:
        os.close(out_r)
        if pidfd is not None:
            os.close(pidfd)
        status = _kill_everything_else(pid)
    return status, timed_out, truncated, output[:max_output]


def _kill_everything_else(child: int) -> int:
    """Inside the sandbox: SIGKILL every process this one may signal (kill(-1) spares itself and
    pid 1), which there means every leftover of the test. Reap the child; its exit status.

    kill(-1) is only safe in a fresh pid namespace as a non-root uid; anywhere else (unsandboxed
    mode) it would hit every process of the user, so only the child's process group is killed.
    """
    target = -1 if _IN_OWN_PID_NAMESPACE and os.getuid() != 0 else -child
    try:
        os.kill(target, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        return os.waitstatus_to_exitcode(os.waitpid(child, 0)[1])
    except ChildProcessError:
        return -signal.SIGKILL


def main() -> None:
    start = time.monotonic()
    # A child's SIGINT would otherwise print a KeyboardInterrupt traceback: this process writes
    # to stderr only when the sandbox itself is broken (the host raises on that).
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    _make_undumpable()
    mode, program, tests, per_test, total, max_output = marshal.loads(sys.stdin.buffer.read())
    end = start + total
    report = bytearray(RESULT_PREFIX)  # written at the very end: children must not inherit it buffered
    if mode == "asserts":
        for test in tests:
            remaining = end - time.monotonic()
            passed = remaining > 0.01 and _run_assert(program, test, min(per_test, remaining))
            report += b"1" if passed else b"0"
        report += b"\n"
    else:
        report += b"%d\n" % len(tests)
        for stdin_text in tests:
            remaining = end - time.monotonic()
            if remaining > 0.01:
                status, timed_out, truncated, output = _run_case(program, stdin_text, min(per_test, remaining), max_output)
            else:
                status, timed_out, truncated, output = _FAILED_TO_START, True, False, b""
            report += b"%d %d %d %d\n" % (status, timed_out, truncated, len(output)) + output
    sys.stdout.buffer.write(report)
    sys.stdout.buffer.flush()


if __name__ == "__main__":
    main()
