"""Agent code for examples/agent-calculator.toml: a plain OpenAI-client agent with a calculator.

grpo-run calls ``solve(row, base_url)`` once per episode; ``base_url`` is the episode's own
OpenAI-compatible endpoint on 127.0.0.1, backed by the policy being trained. Nothing here knows
about grpo-run: the same function runs against any OpenAI-compatible server.
"""

from __future__ import annotations

import ast
import json
import operator

from openai import AsyncOpenAI

CALCULATOR = {"type": "function", "function": {
    "name": "calculator", "description": "Evaluate an arithmetic expression.",
    "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]}}}
OPERATORS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul}


def calculate(expression: str) -> str:
    """Integers with + - * only (no eval)."""
    def value(node):
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in OPERATORS:
            return OPERATORS[type(node.op)](value(node.left), value(node.right))
        raise ValueError(f"cannot calculate {expression!r}")

    try:
        return str(value(ast.parse(expression, mode="eval").body))
    except (SyntaxError, ValueError) as exc:
        return f"error: {exc}"


async def solve(row, base_url):
    """Ask the row's question with the calculator offered, run the calls it makes and send their
    results back; the reward is 1.0 for a final answer equal to the row's ground truth."""
    async with AsyncOpenAI(base_url=base_url, api_key="unused", max_retries=0) as client:
        messages = [dict(m) for m in row["messages"]]
        for _ in range(3):
            response = await client.chat.completions.create(model="policy", messages=messages, tools=[CALCULATOR])
            message = response.choices[0].message
            messages.append(message.model_dump(exclude_none=True))  # as served: the episode stays one segment
            if not message.tool_calls:
                break
            for call in message.tool_calls:
                result = calculate(json.loads(call.function.arguments).get("expression", ""))
                messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
    return float((message.content or "").strip() == row["ground_truth"])
