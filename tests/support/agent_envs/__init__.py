"""Agent functions for the ``agent`` environment's tests: plain agent code on the real ``openai``
client, offline (``async def f(row, base_url) -> float``)."""

from __future__ import annotations

import ast
import asyncio
import json
import operator
import socket
from collections.abc import Mapping
from typing import Any

CALCULATOR = {"type": "function", "function": {
    "name": "calculator", "description": "Evaluate an arithmetic expression.",
    "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]}}}
_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv}


def calculate(expression: str) -> str:
    """The agent's own calculator: integers and + - * //, nothing else."""
    def value(node: ast.AST) -> int:
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](value(node.left), value(node.right))
        raise ValueError(f"cannot calculate {expression!r}")

    try:
        return str(value(ast.parse(expression, mode="eval").body))
    except (SyntaxError, ValueError, ZeroDivisionError) as exc:
        return f"error: {exc}"


def question(row: Mapping[str, Any]) -> list[dict[str, Any]]:
    if "messages" in row:
        return [dict(m) for m in row["messages"]]
    return [{"role": "user", "content": row["prompt"]}]


async def solve(row: Mapping[str, Any], base_url: str) -> float:
    """Ask the question with the calculator tool; run each call and send the result back; the
    reward is 1.0 when the final answer is the row's ground truth."""
    from openai import AsyncOpenAI

    async with AsyncOpenAI(base_url=base_url, api_key="unused", max_retries=0) as client:
        messages = question(row)
        for _ in range(4):
            response = await client.chat.completions.create(model="policy", messages=messages, tools=[CALCULATOR])
            message = response.choices[0].message
            messages.append(message.model_dump(exclude_none=True))
            if not message.tool_calls:
                break
            for call in message.tool_calls:
                result = calculate(json.loads(call.function.arguments).get("expression", ""))
                messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
    return float((message.content or "").strip() == str(row["ground_truth"]))


async def nudged(row: Mapping[str, Any], base_url: str) -> float:
    """:func:`solve`, but the first reply that calls no tool is answered "again" once: every
    episode has at least two requests, the second carrying the first reply as the client got it."""
    from openai import AsyncOpenAI

    async with AsyncOpenAI(base_url=base_url, api_key="unused", max_retries=0) as client:
        messages, nudges = question(row), 1
        for _ in range(4):
            response = await client.chat.completions.create(model="policy", messages=messages, tools=[CALCULATOR])
            message = response.choices[0].message
            messages.append(message.model_dump(exclude_none=True))
            if response.choices[0].finish_reason == "length":
                break
            if not message.tool_calls:
                if not nudges:
                    break
                nudges -= 1
                messages.append({"role": "user", "content": "again"})
            for call in message.tool_calls or ():
                result = calculate(json.loads(call.function.arguments).get("expression", ""))
                messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
    return float((message.content or "").strip() == str(row["ground_truth"]))


RESPONSES: list[Any] = []
"""What the recording agents saw (tests read it)."""


async def record(row: Mapping[str, Any], base_url: str) -> float:
    """Like :func:`solve`, keeping every response in :data:`RESPONSES`."""
    from openai import AsyncOpenAI

    async with AsyncOpenAI(base_url=base_url, api_key="unused", max_retries=0) as client:
        RESPONSES.append(await client.models.list())
        messages = question(row)
        for _ in range(4):
            response = await client.chat.completions.create(model="policy", messages=messages, tools=[CALCULATOR])
            RESPONSES.append(response)
            message = response.choices[0].message
            messages.append(message.model_dump(exclude_none=True))
            if not message.tool_calls:
                break
            for call in message.tool_calls:
                messages.append({"role": "tool", "tool_call_id": call.id,
                                 "content": calculate(json.loads(call.function.arguments)["expression"])})
    return 1.0


async def malformed(row: Mapping[str, Any], base_url: str) -> float:
    """Sends a message with an unknown role (the openai client raises on the 400)."""
    from openai import AsyncOpenAI

    async with AsyncOpenAI(base_url=base_url, api_key="unused", max_retries=0) as client:
        await client.chat.completions.create(model="policy", messages=[{"role": "wizard", "content": "hi"}])
    return 1.0


async def broken(row: Mapping[str, Any], base_url: str) -> float:
    raise RuntimeError("the agent broke")


async def forever(row: Mapping[str, Any], base_url: str) -> float:
    await asyncio.sleep(3600)
    return 1.0


LEFT_OPEN: list[socket.socket] = []


async def never_closes(row: Mapping[str, Any], base_url: str) -> float:
    """Opens a connection to the endpoint that it never finishes nor closes, then answers normally."""
    host_port = base_url.split("/")[2]
    host, port = host_port.split(":")
    sock = socket.create_connection((host, int(port)))
    sock.sendall(b"POST " + base_url.split(host_port)[1].encode() + b"/chat/completions HTTP/1.1\r\nHost: x\r\n")
    LEFT_OPEN.append(sock)  # half a request, never closed
    return await solve(row, base_url)


def not_async(row: Mapping[str, Any], base_url: str) -> float:
    return 1.0


async def huge_request(row: Mapping[str, Any], base_url: str) -> float:
    """One request whose user message is 100 KB of digits (a runaway prompt)."""
    from openai import AsyncOpenAI

    async with AsyncOpenAI(base_url=base_url, api_key="unused", max_retries=0) as client:
        await client.chat.completions.create(model="policy", messages=[{"role": "user", "content": "7" * 100_000}])
    return 1.0


AT_ONCE: list[Any] = []
"""What each request of :func:`thousand_at_once` got: a response or the exception (tests read it)."""
AT_ONCE_COUNT = 1000
"""How many requests :func:`thousand_at_once` sends (tests send fewer)."""


async def thousand_at_once(row: Mapping[str, Any], base_url: str) -> float:
    """1000 requests of one episode at once (``asyncio.gather``), each on a connection of its own."""
    import httpx
    from openai import AsyncOpenAI

    limits = httpx.Limits(max_connections=AT_ONCE_COUNT, max_keepalive_connections=0)
    async with AsyncOpenAI(base_url=base_url, api_key="unused", max_retries=0,
                           http_client=httpx.AsyncClient(limits=limits, timeout=60)) as client:
        got = await asyncio.gather(*(client.chat.completions.create(model="policy", messages=question(row))
                                     for _ in range(AT_ONCE_COUNT)), return_exceptions=True)
    AT_ONCE[:] = got
    return 1.0


PARALLEL: list[Any] = []
"""The two sub-query responses of :func:`parallel_subqueries` (tests read them)."""


async def parallel_subqueries(row: Mapping[str, Any], base_url: str) -> float:
    """Asks the question, then two follow-ups after the same history at once (``asyncio.gather``,
    as agent frameworks do for parallel sub-queries), then a last request after the first of them."""
    from openai import AsyncOpenAI

    async with AsyncOpenAI(base_url=base_url, api_key="unused", max_retries=0) as client:
        messages = question(row)
        first = await client.chat.completions.create(model="policy", messages=messages)
        messages.append(first.choices[0].message.model_dump(exclude_none=True))
        branches = [messages + [{"role": "user", "content": q}] for q in ("1+1", "2+2")]
        PARALLEL[:] = await asyncio.gather(*(client.chat.completions.create(model="policy", messages=b)
                                             for b in branches))
        branches[0].append(PARALLEL[0].choices[0].message.model_dump(exclude_none=True))
        branches[0].append({"role": "user", "content": "3+3"})
        await client.chat.completions.create(model="policy", messages=branches[0])
    return 1.0

