"""The ``python`` tool: runs a program in the code verifier's bubblewrap sandbox, with its limits.

The program's stdout (and stderr, when it fails) is the answer; a timeout or a crash is a
:class:`grpo_run.ToolError` whose message goes back to the model.
"""

from __future__ import annotations

import sys

import attrs

from grpo_run import ToolError
from grpo_run.plugins.tools.common import OneStringTool
from grpo_run.plugins.verifiers.sandbox import SandboxLimits, run_sandboxed

_positive = attrs.validators.gt(0)


@attrs.frozen
class PythonToolConfig:
    """Options of the ``python`` tool (the sandbox limits of the ``code`` verifier)."""

    timeout_s: float = attrs.field(default=5.0, validator=_positive)
    """Wall-clock limit of one program."""
    cpu_s: int = attrs.field(default=5, validator=_positive)
    """RLIMIT_CPU of each sandboxed process, in seconds."""
    memory_mb: int = attrs.field(default=512, validator=_positive)
    """RLIMIT_AS (address space) of each sandboxed process, in MiB."""
    max_processes: int = attrs.field(default=32, validator=_positive)
    """RLIMIT_NPROC: processes (and threads) of one sandbox."""
    max_output_bytes: int = attrs.field(default=1 << 16, validator=_positive)
    """Output kept of each stream; more kills the program."""
    tmp_size_mb: int = attrs.field(default=32, validator=_positive)
    """Size cap of the private ``/tmp`` (and ``/dev/shm``); also the largest file."""
    unsandboxed: bool = False
    """Run without bubblewrap (rlimits and timeout only). UNSAFE."""
    python: str = sys.executable
    """Interpreter that runs the program (standard library only inside the sandbox)."""
    bwrap: str = "bwrap"
    """bubblewrap executable (name on PATH or absolute path)."""

    def limits(self) -> SandboxLimits:
        return SandboxLimits(
            timeout_s=self.timeout_s, cpu_s=self.cpu_s, memory_mb=self.memory_mb,
            max_processes=self.max_processes, max_output_bytes=self.max_output_bytes,
            max_file_mb=self.tmp_size_mb, tmp_size_mb=self.tmp_size_mb,
        )


class PythonTool(OneStringTool):
    """Runs a Python program (standard library only, no network) and returns what it printed."""

    name = "python"
    Config = PythonToolConfig
    description = "Run a Python program and return what it prints (standard library only, no network)."
    argument = "code"
    argument_description = "the program"

    def run(self, code: str) -> str:
        try:
            code.encode()
        except UnicodeEncodeError as exc:  # a lone surrogate: no program file can hold it
            raise ToolError(f"the program is not valid text ({exc.reason} at character {exc.start})") from None
        c = self.config
        result = run_sandboxed(code, limits=c.limits(), python=c.python, bwrap=c.bwrap, sandboxed=not c.unsandboxed)
        out = result.stdout.decode("utf-8", "replace")
        if result.timed_out:
            raise ToolError(f"the program ran longer than {c.timeout_s:g} s")
        if result.truncated:
            raise ToolError(f"the program printed more than {c.max_output_bytes} bytes")
        if result.exit_code != 0:
            err = result.stderr.decode("utf-8", "replace").strip().splitlines()
            raise ToolError(f"exit code {result.exit_code}: {err[-1] if err else 'no error output'}")
        return out
