"""Sandboxed programs per second through the ``code`` verifier (target: >= 20/s on 2 cores).

A "program" is one ``score`` call: one bubblewrap sandbox whose trusted runner forks a child per
test, for three asserts or three stdin/stdout cases. Calls run on a small thread pool; each
sandbox is its own process tree.

    python bench/bench_code.py [--programs 120] [--threads 4]
"""

from __future__ import annotations

import argparse
import time
from concurrent.futures import ThreadPoolExecutor

from grpo_run.plugins.verifiers.code import CodeVerifier, CodeVerifierConfig

GOOD = "```python\ndef f(x):\n    return x + 1\n```"
WRONG = "```python\ndef f(x):\n    return x - 1\n```"
ASSERTS = {"tests": ["assert f(1) == 2", "assert f(2) == 3", "assert f(10) == 11"]}
STDIN_GOOD = "```python\nprint(int(input()) + 1)\n```"
STDIN_CASES = {"stdin_stdout": [{"input": f"{i}\n", "output": f"{i + 1}\n"} for i in range(3)]}


def bench(verifier: CodeVerifier, jobs: list[tuple[str, dict]], threads: int) -> tuple[float, float]:
    """(programs/s, mean score) of scoring ``jobs`` on ``threads`` threads."""
    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=threads) as pool:
        results = list(pool.map(lambda job: verifier.score(job[0], job[1], {}), jobs))
    elapsed = time.perf_counter() - start
    return len(jobs) / elapsed, sum(r.score for r in results) / len(results)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--programs", type=int, default=120)
    parser.add_argument("--threads", type=int, default=4)
    args = parser.parse_args()
    verifier = CodeVerifier(CodeVerifierConfig())
    verifier.score(GOOD, ASSERTS, {})  # warm the page cache
    n = args.programs
    asserts = [(GOOD if i % 2 == 0 else WRONG, ASSERTS) for i in range(n)]
    stdin = [(STDIN_GOOD, STDIN_CASES) for _ in range(n // 3)]
    runs = (("asserts (3 per program, 1 sandbox)", asserts, 0.5), ("stdin/stdout (3 cases per program, 1 sandbox)", stdin, 1.0))
    for label, jobs, expected in runs:
        for threads in sorted({1, args.threads}):
            rate, mean = bench(verifier, jobs, threads)
            assert abs(mean - expected) < 1e-9, f"unexpected mean score {mean} for {label}"
            print(f"code verifier, {label}: {rate:6.1f} programs/s with {threads} thread(s) (target >= 20/s)")


if __name__ == "__main__":
    main()
