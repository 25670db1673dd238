"""The python tool runs programs in the code verifier's bubblewrap sandbox, with its limits."""

from __future__ import annotations

import shutil

import pytest

from grpo_run import ToolError
from grpo_run.plugins.tools.python import PythonTool, PythonToolConfig

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")


def test_a_program_prints_its_answer():
    assert PythonTool(PythonToolConfig())({"code": "print(sum(range(10)))"}) == "45\n"


def test_the_sandbox_has_no_network_and_no_host_files():
    tool = PythonTool(PythonToolConfig())
    with pytest.raises(ToolError, match="exit code 1: .*(FileNotFoundError|No such file)"):
        tool({"code": "print(open('/etc/passwd').read())"})
    with pytest.raises(ToolError, match="exit code 1: OSError"):
        tool({"code": "import socket; socket.create_connection(('1.1.1.1', 80), timeout=1)"})


def test_a_slow_program_is_cut_at_its_timeout():
    with pytest.raises(ToolError, match="ran longer than 1 s"):
        PythonTool(PythonToolConfig(timeout_s=1.0))({"code": "while True: pass"})
