"""The ``code`` verifier: run the completion's last fenced code block against tests, sandboxed.

Ground truth (a mapping, or the same as a JSON string), one of:

* ``{"tests": ["assert f(1) == 2", ...]}`` -- the program, then each assert; a test passes only
  when the child running it proves it got past the assert, so an early ``os._exit(0)``, a hang
  or a crash fails exactly the asserts it touches.
* ``{"stdin_stdout": [{"input": "...", "output": "..."}, ...]}`` -- the program as ``__main__``
  with ``input`` on stdin; a case passes when it exits 0 in time and its stdout equals ``output``
  after stripping trailing whitespace of each line and trailing blank lines.

All tests of a program run in one sandbox: a trusted runner (:mod:`.sandbox_runner`) forks one
child per test and reports what each did; nothing the program prints can change that report.

Score = fraction of tests/cases passing. No fenced block scores 0 (``metrics["code_found"] = 0``).
The sandbox is :mod:`grpo_run.plugins.verifiers.sandbox` (bubblewrap); without bubblewrap the
verifier refuses to start unless ``unsandboxed = true``.
"""

from __future__ import annotations

import json
import re
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import attrs
import structlog

from grpo_run import VerifierConfig, VerifierResult
from grpo_run.plugins.verifiers import sandbox_runner
from grpo_run.plugins.verifiers.sandbox import SandboxLimits, SandboxResult, find_bwrap, run_sandboxed

logger = structlog.get_logger()

_FENCE = re.compile(r"^[ \t]*```[ \t]*([\w+.-]*)[^\n]*\n(.*?)^[ \t]*```", re.DOTALL | re.MULTILINE)
_RUNNER_SOURCE = Path(sandbox_runner.__file__).read_text(encoding="utf-8")
_MIN_RUN_S = 0.05
"""A run is not started with less budget left than this (it would only time out)."""
_RUNNER_SLACK_S = 0.5
"""Sandbox wall-clock time beyond the runner's own deadline (interpreter start-up, the report)."""
_NOT_PYTHON = frozenset({"bash", "sh", "shell", "console", "text", "txt", "json", "output", "c", "cpp", "java"})

_positive = attrs.validators.gt(0)


def _positive_int(default: int) -> Any:
    return attrs.field(default=default, validator=[attrs.validators.instance_of(int), _positive])


def _positive_float(default: float) -> Any:
    return attrs.field(default=default, converter=float, validator=_positive)


@attrs.frozen
class CodeVerifierConfig(VerifierConfig):
    """Options of the ``code`` verifier (``weight`` comes from :class:`grpo_run.VerifierConfig`)."""

    timeout_s: float = _positive_float(5.0)
    """Wall-clock limit of one program run: one stdin/stdout case, or the program plus one assert."""
    call_budget_s: float = _positive_float(8.0)
    """Wall-clock budget of one ``score`` call (all its runs); tests not run in it fail. Keep it
    below the scorer's per-call timeout so a slow program scores 0 instead of killing a worker."""
    cpu_s: int = _positive_int(5)
    """RLIMIT_CPU of each sandboxed process, in seconds."""
    memory_mb: int = _positive_int(512)
    """RLIMIT_AS (address space) of each sandboxed process, in MiB."""
    max_processes: int = _positive_int(32)
    """RLIMIT_NPROC: processes (and threads) of one sandbox (each sandbox has its own count)."""
    max_output_bytes: int = _positive_int(1 << 20)
    """Stdout kept of one stdin/stdout case; a case that prints more fails."""
    tmp_size_mb: int = _positive_int(32)
    """Size cap of the private ``/tmp`` (and ``/dev/shm``); also the largest file (RLIMIT_FSIZE)."""
    unsandboxed: bool = attrs.field(default=False, validator=attrs.validators.instance_of(bool))
    """Run without bubblewrap (rlimits and timeout only). UNSAFE: the code sees and can change
    whatever this user can. For machines where bubblewrap cannot be installed."""
    python: str = attrs.field(default=sys.executable, validator=attrs.validators.instance_of(str))
    """Interpreter that runs the code (a venv's python resolves to its base install, bound
    read-only with site-packages hidden: programs can import the standard library only)."""
    bwrap: str = attrs.field(default="bwrap", validator=attrs.validators.instance_of(str))
    """bubblewrap executable (name on PATH or absolute path)."""

    def limits(self, timeout_s: float, max_output_bytes: int) -> SandboxLimits:
        """Sandbox limits of one run with wall-clock limit ``timeout_s``."""
        return SandboxLimits(
            timeout_s=timeout_s,
            cpu_s=self.cpu_s,
            memory_mb=self.memory_mb,
            max_processes=self.max_processes,
            max_output_bytes=max_output_bytes,
            max_file_mb=self.tmp_size_mb,
            tmp_size_mb=self.tmp_size_mb,
        )


class SandboxFailed(RuntimeError):
    """The sandbox could not run the tests (a setup problem, not the program's fault)."""


class CodeVerifier:
    """Pass rate of the completion's last fenced code block on the row's tests (see module doc).

    ``metrics``: ``code_found`` (1/0), ``tests`` (how many), ``passed`` (how many),
    ``run_timeouts`` (stdin/stdout cases stopped at ``timeout_s``, or runners killed at the
    sandbox's wall-clock limit).
    """

    name: ClassVar[str] = "code"
    Config: ClassVar[type] = CodeVerifierConfig

    def __init__(self, config: CodeVerifierConfig | None = None) -> None:
        self.config = config if config is not None else CodeVerifierConfig()
        if self.config.unsandboxed:
            logger.warning(
                "code verifier runs UNSANDBOXED: untrusted code can read and change this machine",
                config="verifiers.code.unsandboxed = true",
            )
        else:
            find_bwrap(self.config.bwrap)  # refuse to start without bubblewrap

    def score(self, completion: str, ground_truth: Any, row: Mapping[str, Any]) -> VerifierResult:
        """Run the last fenced block of ``completion`` against ``ground_truth``'s tests."""
        tests, cases = parse_ground_truth(ground_truth)
        count = len(tests) if tests is not None else len(cases or ())
        program = last_code_block(completion)
        if program is None:
            return VerifierResult(score=0.0, metrics={"code_found": 0.0, "tests": float(count), "passed": 0.0})
        deadline = time.monotonic() + self.config.call_budget_s
        if tests is not None:
            passed, timeouts = self._run_asserts(program, tests, deadline)
        else:
            passed, timeouts = self._run_cases(program, cases or [], deadline)
        n_passed = sum(passed)
        return VerifierResult(
            score=n_passed / count if count else 0.0,
            metrics={
                "code_found": 1.0,
                "tests": float(count),
                "passed": float(n_passed),
                "run_timeouts": float(timeouts),
            },
        )

    def _run_tests(self, payload: bytes, runner_s: float, max_output_bytes: int) -> SandboxResult:
        """The runner with ``payload`` in one sandbox."""
        return run_sandboxed(
            _RUNNER_SOURCE,
            payload,
            self.config.limits(runner_s + _RUNNER_SLACK_S, max_output_bytes),
            python=self.config.python,
            bwrap=self.config.bwrap,
            sandboxed=not self.config.unsandboxed,
        )

    def _runner_budget(self, count: int, deadline: float) -> float:
        """Seconds the runner gets: a timeout per test, within what is left of the call's budget.
        The runner stops starting tests at its own deadline; the sandbox's wall-clock limit is a
        little later and only catches a stuck runner."""
        return min(deadline - time.monotonic() - _RUNNER_SLACK_S, self.config.timeout_s * count)

    def _run_asserts(self, program: str, tests: Sequence[str], deadline: float) -> tuple[list[bool], int]:
        """(pass per assert, sandbox timeouts)."""
        runner_s = self._runner_budget(len(tests), deadline)
        if not tests or runner_s < _MIN_RUN_S:
            return [False] * len(tests), 0
        payload = sandbox_runner.encode_asserts(program, list(tests), self.config.timeout_s, runner_s)
        result = self._run_tests(payload, runner_s, 1 << 16)
        verdicts = sandbox_runner.decode_asserts(result.stdout, len(tests)) if result.ok else None
        if verdicts is None:  # the runner was killed or stuck: nothing it ran counts
            _raise_if_broken(result)
            return [False] * len(tests), int(result.timed_out)
        return verdicts, 0

    def _run_cases(self, program: str, cases: Sequence[Mapping[str, str]], deadline: float) -> tuple[list[bool], int]:
        """(pass per stdin/stdout case, timeouts)."""
        runner_s = self._runner_budget(len(cases), deadline)
        if not cases or runner_s < _MIN_RUN_S:
            return [False] * len(cases), 0
        cap = self.config.max_output_bytes
        payload = sandbox_runner.encode_cases(program, [c["input"] for c in cases], self.config.timeout_s, runner_s, cap)
        result = self._run_tests(payload, runner_s, len(cases) * (cap + 64) + 64)
        runs = sandbox_runner.decode_cases(result.stdout, len(cases)) if result.ok else None
        if runs is None:
            _raise_if_broken(result)
            return [False] * len(cases), int(result.timed_out)
        passed = []
        for case, (status, _timed_out, truncated, output) in zip(cases, runs, strict=True):
            same = normalize_output(output.decode(errors="replace")) == normalize_output(case["output"])
            passed.append(status == 0 and not truncated and same)
        return passed, sum(int(run[1]) for run in runs)


def _raise_if_broken(result: SandboxResult) -> None:
    """Raise when the sandbox itself failed (bwrap, setpriv, the interpreter or the runner wrote
    to stderr; untrusted code cannot: its stderr is /dev/null), so that a broken setup is counted
    as a verifier error by the scorer instead of silently scoring every program 0. A runner that
    the program killed, or that ran out of time, writes nothing there and just fails the tests."""
    if not result.killed and result.stderr.strip():
        tail = result.stderr.decode(errors="replace").strip()[-500:]
        raise SandboxFailed(f"the code sandbox failed (exit {result.exit_code}): {tail}")


def last_code_block(text: str) -> str | None:
    """Content of the last fenced block (```python, ```py or a bare ```), or None.

    Blocks tagged with another language (```bash, ```text...) are skipped.
    """
    blocks = [(lang.lower(), body) for lang, body in _FENCE.findall(text)]
    for lang, body in reversed(blocks):
        if lang not in _NOT_PYTHON:
            return body
    return None


def normalize_output(text: str) -> list[str]:
    """Lines with trailing whitespace stripped, trailing blank lines dropped."""
    lines = [line.rstrip() for line in text.replace("\r\n", "\n").split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def parse_ground_truth(ground_truth: Any) -> tuple[list[str] | None, list[dict[str, str]] | None]:
    """(assert tests, None) or (None, stdin/stdout cases); :class:`ValueError` on a bad row."""
    if isinstance(ground_truth, str):
        try:
            ground_truth = json.loads(ground_truth)
        except ValueError as exc:
            raise ValueError(f"code ground truth is a string but not JSON: {exc}") from None
    if not isinstance(ground_truth, Mapping):
        raise TypeError(f"code ground truth must be a mapping or a JSON object, got {type(ground_truth).__name__}")
    if "tests" in ground_truth:
        tests = ground_truth["tests"]
        if not (isinstance(tests, Sequence) and not isinstance(tests, str) and all(isinstance(t, str) for t in tests)):
            raise ValueError("code ground truth 'tests' must be a list of strings")
        return list(tests), None
    if "stdin_stdout" in ground_truth:
        cases = ground_truth["stdin_stdout"]
        ok = isinstance(cases, Sequence) and all(
            isinstance(c, Mapping) and isinstance(c.get("input"), str) and isinstance(c.get("output"), str)
            for c in cases
        )
        if not ok:
            raise ValueError("code ground truth 'stdin_stdout' must be a list of {'input': str, 'output': str}")
        return None, [{"input": c["input"], "output": c["output"]} for c in cases]
    raise ValueError(f"code ground truth needs 'tests' or 'stdin_stdout', got keys {sorted(ground_truth)}")
