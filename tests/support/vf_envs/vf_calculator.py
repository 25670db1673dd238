"""A tiny ``verifiers`` (0.4.0) environment, offline: sums over synthetic rows, with a calculator tool.

Loaded by the package's own loader as taskset id ``vf_calculator`` (this directory on ``sys.path``;
the module exports its ``Taskset`` and the ``Harness`` that plays it, so the harness is the taskset's default). The
harness is an in-process chat loop on the ``openai`` client against the rollout's endpoint (the
package's interception server): it offers ``calculator`` in the OpenAI function form, runs the calls
the model makes, and stops at the first turn that calls nothing. The task's reward is 1 when the
last reply is the sum; a metric counts the tool calls. ``broken = true`` makes every rollout fail,
``stuck = true`` hang, ``nudged = true`` answer the first turn that calls nothing with "again"
(multi-turn rollouts from a model that calls no tool).
"""

from __future__ import annotations

import asyncio
import json
import random

import verifiers.v1 as vf
from verifiers.v1.runtimes import ProgramResult

__all__ = ["CalculatorTaskset", "CalculatorHarness"]

CALCULATOR = {"type": "function", "function": {
    "name": "calculator", "description": "Evaluate a sum or product of two integers.",
    "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]}}}


def calculate(expression: str) -> str:
    for op in "+*-":
        left, sep, right = expression.partition(op)
        if sep and left.strip().isdigit() and right.strip().isdigit():
            a, b = int(left), int(right)
            return str(a + b if op == "+" else a * b if op == "*" else a - b)
    return "error: bad expression"


class CalculatorData(vf.TaskData):
    answer: str = ""


class CalculatorTask(vf.Task[CalculatorData, vf.State, vf.TaskConfig]):
    @vf.reward
    async def correct(self, task: CalculatorData, trace: vf.Trace) -> float:
        return 1.0 if trace.last_reply.strip() == task.answer else 0.0

    @vf.metric
    async def tool_calls(self, trace: vf.Trace) -> float:
        return float(len(trace.tool_messages))


class CalculatorTasksetConfig(vf.TasksetConfig):
    num_tasks: int = 16
    seed: int = 0
    broken: bool = False
    """Every rollout's harness raises (a failing environment)."""
    stuck: bool = False
    """Every rollout's harness hangs for ten minutes after its first model call."""
    nudged: bool = False
    """The first turn that calls no tool is answered "again" instead of ending the rollout."""


class CalculatorTaskset(vf.Taskset[CalculatorTask, CalculatorTasksetConfig]):
    def load(self):
        rng = random.Random(self.config.seed)
        for i in range(self.config.num_tasks):
            a, b = rng.randint(0, 49), rng.randint(0, 49)
            yield CalculatorTask(CalculatorData(id=f"sum-{i}", prompt=f"{a}+{b}", answer=str(a + b),
                                                name="broken" if self.config.broken else
                                                "stuck" if self.config.stuck else
                                                "nudged" if self.config.nudged else None),
                                 self.config.task)


class CalculatorHarnessConfig(vf.HarnessConfig):
    max_turns: int = 3


class CalculatorHarness(vf.Harness[CalculatorHarnessConfig]):
    EXECUTES_CODE = False
    NEEDS_CONTAINER = False

    async def setup(self, runtime) -> None:
        pass

    async def launch(self, ctx, trace, runtime, endpoint, secret, mcp_urls, data, **kwargs) -> ProgramResult:
        from openai import AsyncOpenAI

        if data.name == "broken":
            raise RuntimeError("the harness broke")
        _, prompt = self.resolve_prompt(data)
        messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)
        nudges = 1 if data.name == "nudged" else 0
        async with AsyncOpenAI(base_url=endpoint, api_key=secret, max_retries=0) as client:
            for _ in range(self.config.max_turns):
                reply = await client.chat.completions.create(model=ctx.model, messages=messages, tools=[CALCULATOR])
                message = reply.choices[0].message
                messages.append(message.model_dump(exclude_none=True))
                if data.name == "stuck":
                    await asyncio.sleep(600)
                if reply.choices[0].finish_reason == "length":
                    break
                if not message.tool_calls:
                    if nudges == 0:
                        break
                    nudges -= 1
                    messages.append({"role": "user", "content": "again"})
                for call in message.tool_calls or ():
                    result = calculate(json.loads(call.function.arguments).get("expression", ""))
                    messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
        return ProgramResult(exit_code=0, stdout="", stderr="")
