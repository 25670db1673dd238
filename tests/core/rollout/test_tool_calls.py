"""Tools handed to an environment note their calls: a hung call names its tool."""

from __future__ import annotations

import asyncio
import threading

import pytest

from grpo_run.core.rollout.env_threads import CallTimedOut, DaemonThreadPool
from grpo_run.core.rollout.tool_calls import noted_tools
from grpo_run.plugins.tools.calculator import CalculatorConfig, CalculatorTool


class Hangs:
    name = "hangs"

    def __call__(self, arguments):
        threading.Event().wait(2.0)
        return ""


def test_a_noted_tool_passes_through_and_a_hung_call_names_it():
    tools = noted_tools({"calculator": CalculatorTool(CalculatorConfig()), "hangs": Hangs()})
    assert tools["calculator"]({"expression": "2+3"}) == "5"
    assert tools["calculator"].schema()["function"]["name"] == "calculator"
    pool = DaemonThreadPool(1)

    async def go() -> None:
        with pytest.raises(CallTimedOut) as caught:
            await pool.run(tools["hangs"], {}, timeout=0.2)
        assert caught.value.doing == "tool 'hangs'"

    asyncio.run(go())
    pool.close()
