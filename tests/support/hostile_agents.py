"""Agent code with ordinary mistakes:

* :func:`sync_client`: a synchronous OpenAI client inside ``async def``. The request goes to the
  episode's endpoint, whose handler needs the event loop this call holds: a deadlock (until the
  client's own timeout, 10 minutes by default);
* :func:`flood`: ``FLOOD_N`` requests of one episode at once, as a fan-out search does;
* :func:`stubborn`: after the first ``STUBBORN_FREE`` episodes of the process, an agent whose
  clean-up ignores cancellation for a minute (a ``finally`` that awaits a slow close).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import sys

from openai import AsyncOpenAI, OpenAI


async def sync_client(row, base_url):
    client = OpenAI(base_url=base_url, api_key="unused", max_retries=0)  # the mistake: not AsyncOpenAI
    reply = client.chat.completions.create(model="policy", messages=row["messages"], max_tokens=8)
    return float(reply.choices[0].message.content == row.get("ground_truth"))


async def flood(row, base_url):
    """``FLOOD_N`` (default 1000) requests at once through one ``AsyncOpenAI`` client as it comes
    (a pool of up to 1000 connections; 5 retries, as the endpoint answers a surplus 429 and a busy
    machine serves 150 requests of one episode in more than the default 2 retries' backoff); appends ``{"answered": n, "errors": {type: n}}``
    to the file ``FLOOD_OUT`` when set."""
    n = int(os.environ.get("FLOOD_N", "1000"))
    async with AsyncOpenAI(base_url=base_url, api_key="unused", timeout=120, max_retries=5) as client:
        got = await asyncio.gather(*(client.chat.completions.create(model="policy", messages=row["messages"])
                                     for _ in range(n)), return_exceptions=True)
    errors: dict[str, int] = {}
    for item in got:
        if isinstance(item, BaseException):
            errors[type(item).__name__] = errors.get(type(item).__name__, 0) + 1
    if os.environ.get("FLOOD_OUT"):
        with open(os.environ["FLOOD_OUT"], "a", encoding="utf-8") as out:
            out.write(json.dumps({"answered": n - sum(errors.values()), "errors": errors}) + "\n")
    return 1.0


_episodes = itertools.count()


async def stubborn(row, base_url):
    """Answers once; past the first ``STUBBORN_FREE`` episodes, its clean-up then ignores
    cancellation for 60 s."""
    free = next(_episodes) < int(os.environ.get("STUBBORN_FREE", "0"))
    async with AsyncOpenAI(base_url=base_url, api_key="unused", max_retries=0) as client:
        reply = await client.chat.completions.create(model="policy", messages=row["messages"], max_tokens=8)
    if free:
        return float(reply.choices[0].message.content == row.get("ground_truth"))
    print("an agent holds on", file=sys.stderr, flush=True)
    try:
        await asyncio.sleep(3600)
    finally:  # the mistake: a clean-up that swallows every cancellation for a minute
        loop = asyncio.get_running_loop()
        end = loop.time() + 60
        while loop.time() < end:
            try:
                await asyncio.sleep(end - loop.time())
            except asyncio.CancelledError:
                pass
    return 0.0


async def ok(row, base_url):
    """One model call through a fresh ``AsyncOpenAI`` client, as most agents start."""
    async with AsyncOpenAI(base_url=base_url, api_key="unused", max_retries=0) as client:
        reply = await client.chat.completions.create(model="policy", messages=row["messages"], max_tokens=8)
    return float(reply.choices[0].message.content == row.get("ground_truth"))


async def three_calls(row, base_url):
    """Three model calls in a row through a fresh ``AsyncOpenAI`` client, nothing else."""
    async with AsyncOpenAI(base_url=base_url, api_key="unused", max_retries=0) as client:
        messages = list(row["messages"])
        for _ in range(3):
            reply = await client.chat.completions.create(model="policy", messages=messages, max_tokens=4)
            messages += [reply.choices[0].message.model_dump(exclude_none=True), {"role": "user", "content": "again"}]
    return float(reply.choices[0].message.content == row.get("ground_truth"))


async def holds_the_loop(row, base_url):
    """Holds the event loop for ``HOLD_S`` seconds (a blocking call in ``async def``), then makes
    one model call."""
    import time

    time.sleep(float(os.environ.get("HOLD_S", "2")))  # the mistake: blocking, under any one limit
    return await ok(row, base_url)


async def crowded(row, base_url):
    """Opens ``CROWD`` connections that send half a request and wait (the endpoint holds each), then
    makes one request without retries (timeout 10 s) and appends ``{"first": outcome, "seconds":
    s}`` to the file ``CROWD_OUT``; closes them and answers normally (retrying)."""
    import socket
    import time

    host, port = base_url.split("/")[2].split(":")
    path = "/" + base_url.split("/", 3)[3]
    held = []
    for _ in range(int(os.environ.get("CROWD", "4"))):
        sock = socket.create_connection((host, int(port)))
        sock.sendall(f"POST {path}/chat/completions HTTP/1.1\r\nHost: x\r\n".encode())
        held.append(sock)
    started = time.monotonic()
    try:
        async with AsyncOpenAI(base_url=base_url, api_key="unused", max_retries=0, timeout=10) as client:
            await client.chat.completions.create(model="policy", messages=row["messages"], max_tokens=4)
        outcome = "answered"
    except Exception as exc:  # noqa: BLE001 - recorded for the test
        outcome = type(exc).__name__
    with open(os.environ["CROWD_OUT"], "a", encoding="utf-8") as out:
        out.write(json.dumps({"first": outcome, "seconds": time.monotonic() - started}) + "\n")
    for sock in held:
        sock.close()
    async with AsyncOpenAI(base_url=base_url, api_key="unused", max_retries=8) as client:
        reply = await client.chat.completions.create(model="policy", messages=row["messages"], max_tokens=4)
    return float(reply.choices[0].message.content == row.get("ground_truth"))
