"""GPU tests that need an optional package skip with a reason where it is absent, instead of failing
in a worker process (issue 29: vLLM tests failed with ModuleNotFoundError on a GPU without vLLM)."""

from __future__ import annotations

from support.optional import requires


def test_a_missing_package_skips_with_the_install_hint() -> None:
    mark = requires("no_such_package_grpo_run_test", "pip install nothing")
    assert mark.args == (True,)
    assert mark.kwargs["reason"] == (
        "needs 'no_such_package_grpo_run_test' in this interpreter, not installed: pip install nothing"
    )


def test_an_installed_package_does_not_skip() -> None:
    assert requires("json", "-").args == (False,)
