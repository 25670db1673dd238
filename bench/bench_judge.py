"""Concurrent ``judge`` calls against the loopback fake endpoint (tests/judge_server.py).

The server runs as its own process, as a real judge would (so its threads do not share this
process's GIL), and takes ``--delay`` seconds per request (model ``slow:<delay>``): throughput is
bound by how many requests the verifier keeps in flight, ideally max_concurrency / delay. For
each ``--concurrency`` it prints the most requests the server saw in flight at once, the errors,
the throughput, the client's CPU time per request and the call latency. Every call is a distinct
request (no cache hits). Target: >= 64 concurrent judge calls without errors.

    python bench/bench_judge.py [--concurrency 64 128] [--calls 512] [--delay 0.2]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from grpo_run.plugins.verifiers.judge import JudgeConfig, JudgeVerifier

ROW = {"id": "bench", "prompt": "Grade me."}


@contextmanager
def server_process() -> Iterator[str]:
    """Run tests/judge_server.py in a child process; yield its base URL."""
    script = Path(__file__).resolve().parents[1] / "tests" / "judge_server.py"
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        yield proc.stdout.readline().strip()
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def server_stats(base_url: str, path: str = "/stats") -> dict[str, int]:
    with urllib.request.urlopen(base_url.removesuffix("/v1") + path, timeout=10) as response:
        return json.loads(response.read())


async def drive(judge: JudgeVerifier, calls: int) -> tuple[float, list[float], int]:
    """(seconds, latencies in ms of the successful calls, errors) for ``calls`` concurrent calls."""
    start = time.perf_counter()
    results = await asyncio.gather(
        *(judge.score(f"completion {i} <<score={i % 11}>>", "gold", ROW) for i in range(calls)),
        return_exceptions=True,
    )
    elapsed = time.perf_counter() - start
    await judge.aclose()
    errors = [r for r in results if isinstance(r, BaseException)]
    for error in errors[:3]:
        print(f"  error: {type(error).__name__}: {error}")
    latencies = [r.metrics["judge_latency_ms"] for r in results if not isinstance(r, BaseException)]
    return elapsed, latencies, len(errors)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--concurrency", type=int, nargs="+", default=[64, 128])
    parser.add_argument("--calls", type=int, default=512)
    parser.add_argument("--delay", type=float, default=0.2, help="server-side seconds per request")
    args = parser.parse_args()
    print(
        f"{'max_conc':>8} {'calls':>6} {'in_flight':>9} {'errors':>6} {'req/s':>8} {'ideal':>7} "
        f"{'cpu ms/req':>10} {'p50 ms':>8} {'p95 ms':>8}"
    )
    with server_process() as base_url:
        for concurrency in args.concurrency:
            server_stats(base_url, "/reset")
            config = JudgeConfig(base_url=base_url, model=f"slow:{args.delay}", max_concurrency=concurrency, timeout_s=30.0)
            cpu = time.process_time()
            elapsed, latencies, errors = asyncio.run(drive(JudgeVerifier(config), args.calls))
            cpu = time.process_time() - cpu
            stats = server_stats(base_url)
            q = statistics.quantiles(latencies, n=20) if len(latencies) > 1 else [float("nan")] * 19
            print(
                f"{concurrency:>8} {args.calls:>6} {stats['max_in_flight']:>9} {errors:>6} "
                f"{args.calls / elapsed:>8.1f} {concurrency / args.delay:>7.1f} {1000 * cpu / args.calls:>10.2f} "
                f"{q[9]:>8.1f} {q[18]:>8.1f}"
            )


if __name__ == "__main__":
    main()
