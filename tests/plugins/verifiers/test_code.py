"""The ``code`` verifier on ordinary programs: asserts, stdin/stdout, partial credit, extraction,
ground-truth forms, config, and what happens without bubblewrap. Hostile programs are in
``test_sandbox_hostile.py``."""

from __future__ import annotations

import json
import shutil

import attrs
import pytest

from grpo_run.plugins.verifiers.code import (
    CodeVerifier,
    CodeVerifierConfig,
    SandboxFailed,
    last_code_block,
    normalize_output,
    parse_ground_truth,
)
from grpo_run.plugins.verifiers.sandbox import BubblewrapMissing

HAVE_BWRAP = shutil.which("bwrap") is not None
needs_bwrap = pytest.mark.skipif(not HAVE_BWRAP, reason="needs bubblewrap (apt-get install -y bubblewrap)")

CONFIG = CodeVerifierConfig(timeout_s=2.0, call_budget_s=4.0)
ADD_ONE = "Here you go:\n```python\ndef f(x):\n    return x + 1\n```\n"
TESTS = {"tests": ["assert f(1) == 2", "assert f(2) == 3", "assert f(-1) == 0"]}
SUM_CASES = {
    "stdin_stdout": [
        {"input": "1 2\n", "output": "3\n"},
        {"input": "5 5\n", "output": "10"},
        {"input": "0 0", "output": "0\n\n"},
    ]
}


@pytest.fixture(scope="module")
def verifier() -> CodeVerifier:
    return CodeVerifier(CONFIG)


@needs_bwrap
def test_correct_program_by_asserts(verifier):
    result = verifier.score(ADD_ONE, TESTS, {})
    assert result.score == 1.0
    assert result.metrics == {"code_found": 1.0, "tests": 3.0, "passed": 3.0, "run_timeouts": 0.0}


@needs_bwrap
def test_wrong_program_by_asserts(verifier):
    assert verifier.score("```python\ndef f(x):\n    return x - 1\n```", TESTS, {}).score == 0.0


@needs_bwrap
def test_partial_credit_by_asserts(verifier):
    # f(1) == 2 holds (1 * 2), f(2) == 3 and f(-1) == 0 do not (4, -2): 1 of 3.
    result = verifier.score("```python\ndef f(x):\n    return x * 2\n```", TESTS, {})
    assert result.score == pytest.approx(1 / 3, abs=1e-12)
    assert result.metrics["passed"] == 1.0


@needs_bwrap
def test_a_crashing_assert_fails_only_itself(verifier):
    # f(2) raises, f(-1) still passes: each assert runs in its own child.
    program = "```python\ndef f(x):\n    if x == 2:\n        raise RuntimeError\n    return x + 1\n```"
    assert verifier.score(program, TESTS, {}).score == pytest.approx(2 / 3, abs=1e-12)


@needs_bwrap
def test_a_hanging_assert_fails_only_itself():
    verifier = CodeVerifier(CodeVerifierConfig(timeout_s=0.5, call_budget_s=3.0))
    program = "```python\ndef f(x):\n    while x == 2:\n        pass\n    return x + 1\n```"
    assert verifier.score(program, TESTS, {}).score == pytest.approx(2 / 3, abs=1e-12)


@needs_bwrap
def test_tests_share_nothing_but_the_program(verifier):
    # State set by one assert is not visible to the next (fresh child each time).
    program = "```python\nseen = []\ndef f(x):\n    seen.append(x)\n    return len(seen)\n```"
    tests = {"tests": ["assert f(0) == 1", "assert f(0) == 1", "assert f(0) == 2"]}
    assert verifier.score(program, tests, {}).score == pytest.approx(2 / 3, abs=1e-12)


@needs_bwrap
def test_correct_program_by_stdin_stdout(verifier):
    program = "```python\na, b = map(int, input().split())\nprint(a + b, '  ')\n```"
    assert verifier.score(program, SUM_CASES, {}).score == 1.0


@needs_bwrap
def test_main_guard_runs_in_stdin_stdout_mode(verifier):
    program = (
        "```py\ndef main():\n    a, b = map(int, input().split())\n    print(a + b)\n\n"
        "if __name__ == '__main__':\n    main()\n```"
    )
    assert verifier.score(program, SUM_CASES, {}).score == 1.0


@needs_bwrap
def test_stdin_stdout_programs_run_like_scripts(verifier):
    cases = {"stdin_stdout": [{"input": "3\n1\n2\n3\n", "output": "6\n"}, {"input": "1\n10\n", "output": "10\n"}]}
    programs = [
        "import sys\nn, *xs = map(int, sys.stdin.read().split())\nprint(sum(xs))\nsys.exit(0)\n",
        "n = int(input())\nprint(sum(int(input()) for _ in range(n)))\nexit()\n",
        "import threading\nout = []\nt = threading.Thread(target=lambda: out.append(sum(map(int, open(0).read().split()[1:]))))"
        "\nt.start()\nt.join()\nprint(out[0])\n",
        "import atexit, sys\natexit.register(lambda: print(sum(map(int, sys.stdin.read().split()[1:]))))\n",
        "total = 0\n"  # a fresh process per case: state does not leak from one case to the next
        "total += sum(map(int, open(0).read().split()[1:]))\nprint(total)\n",
    ]
    for program in programs:
        assert verifier.score(f"```python\n{program}```", cases, {}).score == 1.0, program


@needs_bwrap
def test_stdin_stdout_exit_status_and_output_cap():
    verifier = CodeVerifier(CodeVerifierConfig(timeout_s=1.0, max_output_bytes=100))
    cases = {"stdin_stdout": [{"input": "", "output": "x" * 100}, {"input": "", "output": "x" * 101}]}
    # 100 bytes fit, 101 are past the cap (the run is cut and fails); a non-zero exit fails.
    assert verifier.score("```python\nprint('x' * 100, end='')\n```", cases, {}).score == 0.5
    assert verifier.score("```python\nprint('x' * 101, end='')\n```", cases, {}).score == 0.0
    assert verifier.score("```python\nimport sys\nprint('x' * 100, end='')\nsys.exit(3)\n```", cases, {}).score == 0.0


@needs_bwrap
def test_partial_credit_by_stdin_stdout(verifier):
    # Right only when a == b (5 5 and 0 0): 2 of 3.
    program = "```python\na, b = map(int, input().split())\nprint(2 * a)\n```"
    assert verifier.score(program, SUM_CASES, {}).score == pytest.approx(2 / 3, abs=1e-12)


@needs_bwrap
def test_runtime_error_after_right_output_fails(verifier):
    program = "```python\na, b = map(int, input().split())\nprint(a + b)\nraise SystemExit(1)\n```"
    assert verifier.score(program, SUM_CASES, {}).score == 0.0


@needs_bwrap
def test_wrong_program_by_stdin_stdout(verifier):
    assert verifier.score("```python\nprint('hello')\n```", SUM_CASES, {}).score == 0.0


def test_no_code_block_scores_zero_without_running(verifier):
    result = verifier.score("def f(x): return x + 1", TESTS, {})
    assert result.score == 0.0
    assert result.metrics["code_found"] == 0.0


@needs_bwrap
def test_syntax_error_scores_zero(verifier):
    for gold in (TESTS, SUM_CASES):
        result = verifier.score("```python\ndef f(x) return x\n```", gold, {})
        assert result.score == 0.0
        assert result.metrics["code_found"] == 1.0


@needs_bwrap
def test_ground_truth_as_json_string(verifier):
    assert verifier.score(ADD_ONE, json.dumps(TESTS), {}).score == 1.0
    assert verifier.score("```\nprint(sum(map(int, input().split())))\n```", json.dumps(SUM_CASES), {}).score == 1.0


def test_last_code_block_is_taken():
    text = "```python\nfirst\n```\nthen\n```\nsecond\n```\n```bash\nls\n```"
    assert last_code_block(text) == "second\n"
    assert last_code_block("```py\nx = 1\n```") == "x = 1\n"
    assert last_code_block("no fences here") is None
    assert last_code_block("```python\nunterminated") is None


def test_output_normalisation():
    assert normalize_output("1 \n2\t\n\n\n") == ["1", "2"]
    assert normalize_output("a\r\nb") == ["a", "b"]
    assert normalize_output("a\n\nb") != normalize_output("a\nb")


def test_bad_ground_truth_is_an_error():
    with pytest.raises(ValueError, match="needs 'tests' or 'stdin_stdout'"):
        parse_ground_truth({"asserts": []})
    with pytest.raises(ValueError, match="not JSON"):
        parse_ground_truth("assert f(1) == 2")
    with pytest.raises(ValueError, match="list of strings"):
        parse_ground_truth({"tests": "assert True"})
    with pytest.raises(ValueError, match="'input': str"):
        parse_ground_truth({"stdin_stdout": [{"input": 1, "output": "1"}]})
    with pytest.raises(TypeError, match="mapping"):
        parse_ground_truth(["assert True"])


def test_config_is_validated():
    with pytest.raises(ValueError):
        CodeVerifierConfig(timeout_s=0)
    with pytest.raises(ValueError):
        CodeVerifierConfig(max_processes=-1)
    with pytest.raises(TypeError):
        CodeVerifierConfig(unsandboxed="yes")
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        CONFIG.timeout_s = 1.0  # type: ignore[misc]


@needs_bwrap
def test_a_broken_sandbox_is_an_error_not_a_zero():
    verifier = CodeVerifier(CodeVerifierConfig(python="/nonexistent/python3"))
    for gold in (TESTS, SUM_CASES):
        with pytest.raises(SandboxFailed, match="nonexistent"):
            verifier.score(ADD_ONE, gold, {})


def test_missing_bubblewrap_refuses_to_start():
    with pytest.raises(BubblewrapMissing, match=r"apt-get install -y bubblewrap"):
        CodeVerifier(CodeVerifierConfig(bwrap="/nonexistent/bwrap"))


def test_unsandboxed_opt_in_runs_without_bubblewrap(capsys):
    verifier = CodeVerifier(CodeVerifierConfig(bwrap="/nonexistent/bwrap", unsandboxed=True, timeout_s=2.0))
    assert "UNSANDBOXED" in capsys.readouterr().out
    assert verifier.score(ADD_ONE, TESTS, {}).score == 1.0
    assert verifier.score("```python\nprint(sum(map(int, input().split())))\n```", SUM_CASES, {}).score == 1.0
    # Still under the wall-clock limit and rlimits.
    slow = CodeVerifier(CodeVerifierConfig(bwrap="/nonexistent/bwrap", unsandboxed=True, timeout_s=0.5))
    loop = "```python\ndef f(x):\n    while True:\n        pass\n```"
    assert slow.score(loop, {"tests": ["assert f(1) == 2"]}, {}).score == 0.0
    hog = "```python\nx = bytearray(8 << 30)\n```"
    assert slow.score(hog, {"stdin_stdout": [{"input": "", "output": ""}]}, {}).score == 0.0


def test_registered_as_a_builtin():
    from grpo_run.plugins.verifiers import grpo_run_register_verifiers

    registered: list[type] = []
    grpo_run_register_verifiers(registered.append)
    assert CodeVerifier in registered
