"""Run untrusted programs in a bubblewrap sandbox: :func:`run_sandboxed`.

Standard library only and one self-contained file, so it can be reused (and tested) without the
rest of grpo-run: the hostile-code tests load it by path, as ``nobody``, under the system Python,
where no ``grpo_run`` package is importable (so it is not split into modules that import each other).

What a sandboxed run gets (see :func:`bwrap_argv` for the exact command line):

* new pid, network, ipc, uts and cgroup namespaces (no network at all, only a loopback that is
  down), ``--die-with-parent`` and ``--new-session``;
* a read-only root holding ``/usr`` (and the ``/bin``, ``/lib``... links or dirs next to it), the
  Python install that runs the code (its binary and ``lib/``, with ``site-packages`` hidden under an
  empty read-only tmpfs), a fresh ``/proc`` and a minimal ``/dev``; nothing else of the host: no
  ``/etc``, ``/home``, ``/root``, host ``/tmp``, project or run directories;
* a private ``/tmp`` and ``/dev/shm`` (tmpfs capped at ``tmp_size_mb``), the only writable places;
* rlimits on CPU seconds, address space, processes, file size and open files (``prlimit``), and a
  non-root uid: as root, bwrap sets the sandbox up without a user namespace and ``setpriv`` drops
  to ``uid``/``gid`` inside it, because ``RLIMIT_NPROC`` does not bind uid 0 (nor a uid that a
  user namespace maps to 0); ``unshare --user`` then puts the code in a user namespace of its own,
  so that ``RLIMIT_NPROC`` counts this sandbox's processes only (not every process of that uid,
  other sandboxes included). As a non-root user, bwrap makes the user namespace and the code runs
  as the caller's uid outside (``--uid`` inside);
* a wall-clock timeout, after which the sandbox's pid-namespace init (pid from ``--info-fd``)
  is SIGKILLed, so the kernel kills everything left in the namespace, then bwrap's process group
  if it is still there (``--die-with-parent`` covers our own death);
* bounded capture: at most ``max_output_bytes`` per stream; more output kills the run
  (``truncated``).

Without bubblewrap :func:`run_sandboxed` raises :class:`BubblewrapMissing` unless called with
``sandboxed=False``, which keeps only the rlimits and the timeout (the code can then see and
change everything the calling user can).
"""

from __future__ import annotations

import dataclasses
import json
import os
import selectors
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence

INSTALL_HINT = "apt-get install -y bubblewrap"
CODE_PATH = "/sandbox/main.py"
"""Where the code of a :func:`run_sandboxed` call on a string appears inside the sandbox."""
_KILL_GRACE_S = 2.0
"""How long to keep draining pipes after a kill (the tree is gone; only buffered bytes remain)."""


class BubblewrapMissing(RuntimeError):
    """bubblewrap (``bwrap``) is not installed, or the configured path does not exist."""


@dataclasses.dataclass(frozen=True)
class SandboxLimits:
    """Resource limits of one sandboxed run."""

    timeout_s: float = 5.0
    """Wall-clock limit; the whole process tree is killed when it passes."""
    cpu_s: int = 5
    """RLIMIT_CPU of each process, in seconds (SIGKILL at the hard limit)."""
    memory_mb: int = 512
    """RLIMIT_AS of each process (virtual address space), in MiB."""
    max_processes: int = 32
    """RLIMIT_NPROC: processes (threads count too) of the sandbox uid."""
    max_output_bytes: int = 1 << 20
    """Bytes kept of stdout and of stderr; a stream that goes past it kills the run."""
    max_file_mb: int = 16
    """RLIMIT_FSIZE: largest file a process may write, in MiB."""
    tmp_size_mb: int = 32
    """Size cap of the private ``/tmp`` and of ``/dev/shm`` (each), in MiB."""
    max_open_files: int = 64
    """RLIMIT_NOFILE."""
    uid: int = 65534
    """Uid the code runs as when the caller is root (``nobody``)."""
    gid: int = 65534
    """Gid the code runs as when the caller is root (``nogroup``)."""

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise ValueError(f"SandboxLimits.{field.name} must be a positive number, got {value!r}")


@dataclasses.dataclass(frozen=True)
class SandboxResult:
    """What happened to one sandboxed run."""

    exit_code: int
    """Exit status; ``-N`` when the main process died of signal N (or was killed by us)."""
    stdout: bytes
    stderr: bytes
    timed_out: bool
    """The wall-clock limit passed and the tree was killed."""
    killed: bool
    """We killed the tree (timeout or output flood)."""
    truncated: bool
    """A stream went past ``max_output_bytes`` (the run was killed, output cut)."""
    wall_s: float

    @property
    def ok(self) -> bool:
        """Exited 0 on its own with complete output."""
        return self.exit_code == 0 and not self.killed and not self.truncated


def find_bwrap(path: str = "bwrap") -> str:
    """Absolute path of the bwrap executable, or :class:`BubblewrapMissing` naming the install."""
    found = shutil.which(path)
    if found is None:
        raise BubblewrapMissing(
            f"bubblewrap ({path!r}) not found: the code verifier needs it to run untrusted code "
            f"safely; install it with `{INSTALL_HINT}` (or opt into unsandboxed = true, unsafe)"
        )
    return found


def _root_binds() -> list[str]:
    """Read-only ``/usr`` plus the top-level dirs of the dynamic loader and shells, as on the host
    (a symlink on merged-/usr systems, a bind otherwise)."""
    args = ["--ro-bind", "/usr", "/usr"]
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(top):
            args += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            args += ["--ro-bind", top, top]
    return args


def _python_binds(python: str) -> list[str]:
    """Binds that make the Python install at ``python`` usable: its binary and its ``lib/``
    (stdlib, libpython) read-only, with third-party ``site-packages`` hidden. Nothing for a
    Python under ``/usr`` (already bound)."""
    real = os.path.realpath(python)
    if real.startswith("/usr/"):
        return []
    prefix = os.path.dirname(os.path.dirname(real))
    args = []
    # Mount points' parents would otherwise be made 0700 (root-only) in the new root.
    for parent in _ancestors(os.path.dirname(real)):
        args += ["--perms", "0755", "--dir", parent]
    args += ["--ro-bind", real, real]
    lib = os.path.join(prefix, "lib")
    if os.path.isdir(lib):
        args += ["--ro-bind", lib, lib]
        version = f"python{sys.version_info.major}.{sys.version_info.minor}"
        for hidden in (os.path.join(lib, version, "site-packages"),):
            if os.path.isdir(hidden):
                args += ["--size", "4096", "--tmpfs", hidden, "--remount-ro", hidden]
    return args


def _ancestors(path: str) -> list[str]:
    """``/a``, ``/a/b``, ``/a/b/c`` for ``/a/b/c``."""
    parts = [p for p in path.split("/") if p]
    return ["/" + "/".join(parts[: i + 1]) for i in range(len(parts))]


def _limits_argv(limits: SandboxLimits) -> list[str]:
    """``prlimit`` prefix setting soft = hard limits (the code cannot raise them back)."""
    mib = 1 << 20
    cpu = int(limits.cpu_s)
    return [
        shutil.which("prlimit") or "/usr/bin/prlimit",
        f"--cpu={cpu}:{cpu + 1}",
        f"--as={int(limits.memory_mb) * mib}",
        f"--nproc={int(limits.max_processes)}",
        f"--fsize={int(limits.max_file_mb) * mib}",
        f"--nofile={int(limits.max_open_files)}",
        "--core=0",
        "--",
    ]


def bwrap_argv(
    bwrap: str, python: str, limits: SandboxLimits, data_fds: Mapping[str, int], info_fd: int | None = None
) -> list[str]:
    """The bwrap command line up to (not including) the sandboxed command.

    ``data_fds`` maps a path inside the sandbox to an fd whose content appears there read-only;
    bwrap writes ``{"child-pid": N}`` (its namespace init, as a host pid) to ``info_fd``.
    """
    as_root = os.geteuid() == 0
    tmp_bytes = str(int(limits.tmp_size_mb) << 20)
    if as_root:
        # No user namespace: it would map the sandbox uid to host root, and RLIMIT_NPROC would
        # not bind. setpriv (below) drops to limits.uid; only it needs these two capabilities.
        ns = ["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try"]
        ns += ["--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    else:
        # --as-pid-1: no bwrap init beside the code; it would be dumpable and of the same uid, so
        # the code could use its fds (/proc/1/fd) or ptrace it.
        ns = ["--unshare-all", "--unshare-user", "--disable-userns", "--as-pid-1"]
        ns += ["--uid", str(limits.uid), "--gid", str(limits.gid)]
    argv = [bwrap, *ns, "--die-with-parent", "--new-session", "--hostname", "sandbox"]
    if info_fd is not None:
        argv += ["--info-fd", str(info_fd)]
    argv += _root_binds() + _python_binds(python)
    argv += ["--proc", "/proc", "--dev", "/dev"]
    argv += ["--perms", "1777", "--size", tmp_bytes, "--tmpfs", "/tmp"]
    argv += ["--perms", "1777", "--size", tmp_bytes, "--tmpfs", "/dev/shm"]
    for dest, fd in data_fds.items():
        argv += ["--perms", "0444", "--ro-bind-data", str(fd), dest]
    argv += ["--remount-ro", "/dev", "--chdir", "/tmp", "--clearenv"]
    for name, value in (("PATH", "/usr/local/bin:/usr/bin:/bin"), ("HOME", "/tmp"), ("LANG", "C.UTF-8")):
        argv += ["--setenv", name, value]
    argv += ["--"]
    if as_root:
        # Drop to limits.uid, then enter a user namespace of our own (mapping that uid to itself)
        # before prlimit: RLIMIT_NPROC then counts this sandbox's processes only, not every
        # process of the uid on the host (concurrent sandboxes included), as in the non-root case.
        setpriv = shutil.which("setpriv") or "/usr/bin/setpriv"
        unshare = shutil.which("unshare") or "/usr/bin/unshare"
        argv += [setpriv, f"--reuid={limits.uid}", f"--regid={limits.gid}", "--clear-groups", "--inh-caps=-all", "--"]
        argv += [unshare, "--user", "--map-current-user", "--"]
    return argv + _limits_argv(limits)


def python_argv(python: str, script: str) -> list[str]:
    """Run ``script`` isolated (``-I``: no env vars, no user site; ``-S``: no site-packages)."""
    return [os.path.realpath(python), "-I", "-S", "-X", "utf8", script]


def _memfd(name: str, data: bytes) -> int:
    """An in-memory file holding ``data``, positioned at its start (a stdin that cannot block)."""
    fd = os.memfd_create(name, 0)
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def run_sandboxed(
    code_or_argv: str | Sequence[str],
    stdin: bytes | str = b"",
    limits: SandboxLimits | None = None,
    *,
    files: Mapping[str, bytes] | None = None,
    python: str | None = None,
    bwrap: str = "bwrap",
    sandboxed: bool = True,
) -> SandboxResult:
    """Run Python code (a string, at :data:`CODE_PATH`) or an argv inside the sandbox.

    :param stdin: bytes fed to the program's stdin (from a sealed in-memory file).
    :param files: extra read-only files, path inside the sandbox -> content.
    :param python: interpreter for string code (default: this one, ``sys.executable``).
    :param bwrap: bwrap executable name or path.
    :param sandboxed: False runs without bwrap (rlimits and timeout only): unsafe.
    """
    limits = limits if limits is not None else SandboxLimits()
    python = python or sys.executable
    data = {CODE_PATH: code_or_argv.encode()} if isinstance(code_or_argv, str) else {}
    data.update(files or {})
    stdin_bytes = stdin.encode() if isinstance(stdin, str) else stdin
    fds: dict[str, int] = {}
    stdin_fd = _memfd("grpo-run-stdin", stdin_bytes)
    try:
        if sandboxed:
            bwrap_path = find_bwrap(bwrap)
            fds = {dest: _memfd("grpo-run-file", content) for dest, content in data.items()}
            info_r, info_w = os.pipe()
            try:
                command = python_argv(python, CODE_PATH) if isinstance(code_or_argv, str) else list(code_or_argv)
                argv = bwrap_argv(bwrap_path, python, limits, fds, info_w) + command
                return _run(argv, stdin_fd, limits, pass_fds=(*fds.values(), info_w), cwd="/", info=(info_r, info_w))
            finally:
                os.close(info_r)
        return _run_unsandboxed(code_or_argv, data, stdin_fd, limits, python)
    finally:
        for fd in (stdin_fd, *fds.values()):
            os.close(fd)


def _run_unsandboxed(
    code_or_argv: str | Sequence[str], data: Mapping[str, bytes], stdin_fd: int, limits: SandboxLimits, python: str
) -> SandboxResult:
    """Rlimits and timeout only; ``data`` files go to a private temp dir that replaces ``/sandbox``
    and ``/tmp`` in paths the caller passes."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="grpo-run-unsandboxed-") as tmp:
        mapping = {}
        for dest, content in data.items():
            local = os.path.join(tmp, dest.lstrip("/").replace("/", "_"))
            with open(local, "wb") as f:
                f.write(content)
            mapping[dest] = local
        if isinstance(code_or_argv, str):
            command = python_argv(python, mapping[CODE_PATH])
        else:
            command = [mapping.get(a, a) for a in code_or_argv]
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": tmp, "LANG": "C.UTF-8"}
        return _run(_limits_argv(limits) + command, stdin_fd, limits, pass_fds=(), cwd=tmp, env=env)


def _run(
    argv: list[str],
    stdin_fd: int,
    limits: SandboxLimits,
    *,
    pass_fds: tuple[int, ...],
    cwd: str,
    env: Mapping[str, str] | None = None,
    info: tuple[int, int] | None = None,
) -> SandboxResult:
    """Run ``argv`` with bounded capture and a wall-clock limit. ``info``: read and write ends of
    bwrap's ``--info-fd`` pipe (the write end is closed here once bwrap has it)."""
    start = time.monotonic()
    deadline = start + limits.timeout_s
    proc = subprocess.Popen(
        argv,
        stdin=stdin_fd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        pass_fds=pass_fds,
        start_new_session=True,  # its own process group, killed as one
        cwd=cwd,
        env=dict(env) if env is not None else {"PATH": "/usr/bin:/bin"},
    )
    assert proc.stdout is not None and proc.stderr is not None
    killer = _Killer(proc)
    info_buf = bytearray()
    if info is not None:
        os.close(info[1])
    stdout, stderr = bytearray(), bytearray()
    out = {proc.stdout.fileno(): stdout, proc.stderr.fileno(): stderr}
    cap = int(limits.max_output_bytes)
    timed_out = killed = truncated = False
    with selectors.DefaultSelector() as sel:
        for f in (proc.stdout, proc.stderr):
            sel.register(f, selectors.EVENT_READ)
        if info is not None:
            sel.register(info[0], selectors.EVENT_READ)
        while sel.get_map():
            now = time.monotonic()
            if not killed and now >= deadline:
                timed_out = killed = True
                killer.kill()
                deadline = now + _KILL_GRACE_S
            elif killed and now >= deadline:
                break  # a descendant outside the group still holds a pipe: stop reading
            for key, _ in sel.select(timeout=max(0.0, deadline - now)):
                chunk = os.read(key.fd, 65536)
                if not chunk:
                    sel.unregister(key.fileobj)
                    if info is not None and key.fd == info[0]:
                        killer.init_started(bytes(info_buf))
                    continue
                if info is not None and key.fd == info[0]:
                    info_buf += chunk[:4096]
                    continue
                buf = out[key.fd]
                room = cap - len(buf)
                buf += chunk[: max(0, room)]
                if len(chunk) > room and not truncated:
                    truncated = True
                    if not killed:
                        killed = True
                        killer.kill()
                        deadline = time.monotonic() + _KILL_GRACE_S
    try:
        exit_code = proc.wait(timeout=max(0.1, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        killed = True
        killer.kill(force=True)
        exit_code = proc.wait()
    killer.close()
    proc.stdout.close()
    proc.stderr.close()
    return SandboxResult(
        exit_code=exit_code,
        stdout=bytes(stdout),
        stderr=bytes(stderr),
        timed_out=timed_out,
        killed=killed,
        truncated=truncated,
        wall_s=time.monotonic() - start,
    )


class _Killer:
    """Kills a sandbox: its namespace init first (the kernel then kills everything in the pid
    namespace and bwrap reaps the init and exits), bwrap's process group after a grace period or
    when the init is unknown. Killing bwrap first would orphan the init as a zombie."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc
        self.pidfd: int | None = None

    def init_started(self, info: bytes) -> None:
        """bwrap's ``--info-fd`` JSON (``{"child-pid": N}``), sent once the init is cloned."""
        try:
            pid = int(json.loads(info)["child-pid"])
            self.pidfd = os.pidfd_open(pid)
        except (ValueError, KeyError, TypeError, OSError):
            self.pidfd = None

    def kill(self, force: bool = False) -> None:
        if self.pidfd is not None and not force:
            try:
                signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)
                self.proc.wait(timeout=_KILL_GRACE_S / 2)
                return
            except (OSError, subprocess.TimeoutExpired):
                pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def close(self) -> None:
        if self.pidfd is not None:
            os.close(self.pidfd)
            self.pidfd = None
