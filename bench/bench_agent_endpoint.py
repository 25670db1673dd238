"""What the ``agent`` environment's endpoint sustains: requests per second and latency, and how fast
it answers connections past ``environment.max_connections``.

The endpoint (uvicorn on a thread of its own) serves chats that answer at once, on the event
loop that also runs the clients: agents run in the trainer, on its loop, so this is the
arrangement of a run with the policy's time taken out. Part 1: ``--requests`` requests at each
concurrency, spread over enough episodes that no episode passes its ``max_requests_in_flight``
(16), from keep-alive connections that a minimal HTTP/1.1 client drives (the endpoint's own
ceiling), then from one ``httpx.AsyncClient`` (what an ``AsyncOpenAI`` uses: its connection pool
costs CPU on the same loop, more than linearly in its connections). Part 2: a burst of
``--burst`` new connections at once against a cap of ``--cap``: how many are answered 429, and
how soon.

    python bench/bench_agent_endpoint.py [--requests 2000] [--burst 1000] [--cap 64]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from collections import Counter

import httpx

from grpo_run import ChatTurn, ParsedTurn
from grpo_run.plugins.environments.agent_server import EpisodeServer

BODY = {"model": "policy", "messages": [{"role": "user", "content": "12+7"}]}


class InstantChat:
    """A chat whose every turn is "19", at once."""

    async def complete(self, messages, tools=(), *, max_tokens=None, stop=None):
        return ChatTurn(ParsedTurn("19"), (), (), "stop", 4, 1)

    def turns_left(self) -> int:
        return 1 << 30


async def sustained(server: EpisodeServer, concurrency: int, requests: int, raw: bool
                    ) -> tuple[float, float, float, Counter]:
    """(requests/s, p50 s, p99 s, status counts) of ``requests`` requests, ``concurrency`` at a
    time; ``raw``: from :func:`raw_post` on a connection per worker, else from one httpx client."""
    loop = asyncio.get_running_loop()
    episodes = [server.open_episode(InstantChat(), loop) for _ in range(max(1, concurrency // 8))]
    urls = [f"{server.base_url(token)}/chat/completions" for token in episodes]
    latencies: list[float] = []
    statuses: Counter = Counter()
    queue = iter(range(requests))
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(limits=limits, timeout=120) as client:
        async def worker(k: int) -> None:
            stream = await asyncio.open_connection("127.0.0.1", server.port) if raw else None
            for i in queue:
                began = time.perf_counter()
                url = urls[(k + i) % len(urls)]
                status = await raw_post(*stream, url) if stream else (await client.post(url, json=BODY)).status_code
                latencies.append(time.perf_counter() - began)
                statuses[status] += 1
            if stream:
                stream[1].close()

        started = time.perf_counter()
        await asyncio.gather(*(worker(k) for k in range(concurrency)))
        elapsed = time.perf_counter() - started
    for token in episodes:
        server.close_episode(token)
    latencies.sort()
    return requests / elapsed, statistics.median(latencies), latencies[int(0.99 * (len(latencies) - 1))], statuses


async def raw_post(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, url: str) -> int:
    """POST :data:`BODY` to ``url`` on a keep-alive connection; the answer's status."""
    body = json.dumps(BODY).encode()
    path = "/" + url.split("/", 3)[3]
    writer.write(f"POST {path} HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
                 f"content-length: {len(body)}\r\n\r\n".encode() + body)
    head = await reader.readuntil(b"\r\n\r\n")
    length = int(next(line.split(b":", 1)[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")))
    await reader.readexactly(length)
    return int(head.split(b" ", 2)[1])


async def burst(server: EpisodeServer, connections: int) -> tuple[Counter, float, float]:
    """(status counts, seconds to the last 429, seconds to the last answer) of ``connections``
    requests at once, each on a new connection, to episodes that answer after 2 s."""
    loop = asyncio.get_running_loop()

    class SlowChat(InstantChat):
        async def complete(self, *args, **kwargs):
            await asyncio.sleep(2.0)
            return await super().complete(*args, **kwargs)

    episodes = [server.open_episode(SlowChat(), loop) for _ in range(connections // 8 + 1)]
    statuses: Counter = Counter()
    last_429 = last = 0.0
    started = time.perf_counter()

    async def one(client: httpx.AsyncClient, i: int) -> None:
        nonlocal last_429, last
        try:
            got = await client.post(f"{server.base_url(episodes[i // 8])}/chat/completions", json=BODY)
            status: int | str = got.status_code
        except httpx.HTTPError as exc:
            status = type(exc).__name__
        now = time.perf_counter() - started
        statuses[status] += 1
        last = max(last, now)
        if status == 429:
            last_429 = max(last_429, now)

    limits = httpx.Limits(max_connections=connections, max_keepalive_connections=0)  # a connection each
    async with httpx.AsyncClient(limits=limits, timeout=120) as client:
        await asyncio.gather(*(one(client, i) for i in range(connections)))
    for token in episodes:
        server.close_episode(token)
    return statuses, last_429, last


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--burst", type=int, default=1000)
    parser.add_argument("--cap", type=int, default=64)
    args = parser.parse_args()

    server = EpisodeServer(max_connections=1024)
    server.start()
    print("client  concurrency  requests/s  p50 ms  p99 ms  answers")
    for raw, concurrency in [(True, 1), (True, 16), (True, 64), (True, 256), (False, 1), (False, 16), (False, 64)]:
        rate, p50, p99, statuses = asyncio.run(sustained(server, concurrency, args.requests, raw))
        print(f"{'raw' if raw else 'httpx':>6}  {concurrency:>11}  {rate:>10.0f}  {p50 * 1e3:>6.1f}  {p99 * 1e3:>6.1f}  "
              f"{dict(statuses)}")
    server.close()

    capped = EpisodeServer(max_connections=args.cap)
    capped.start()
    statuses, last_429, last = asyncio.run(burst(capped, args.burst))
    capped.close()
    print(f"burst of {args.burst} connections against max_connections = {args.cap}: {dict(statuses)}; "
          f"the last 429 after {last_429:.2f} s, the last answer after {last:.2f} s")


if __name__ == "__main__":
    main()
