"""The compute floor of this machine: fp32 matmul GFLOP/s at a given thread count.

    python bench/floor.py [--threads 2]

Measured, not assumed: the benchmarks divide their FLOP counts by it (a step "at 60% of the
floor" ran its matmul FLOPs at 60% of this rate). 1024^3 matmuls, median of the repeats, so a
loaded machine reads lower -- measure it next to the figures it normalises.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch


def matmul_gflops(threads: int, size: int = 1024, repeats: int = 15, dtype: torch.dtype = torch.float32) -> float:
    """Median GFLOP/s of ``size x size @ size x size`` in ``dtype`` at ``threads`` intra-op threads."""
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        a, b = torch.randn(size, size, dtype=dtype), torch.randn(size, size, dtype=dtype)
        for _ in range(3):  # warm-up: thread pool, caches
            a @ b
        rates = []
        for _ in range(repeats):
            start = time.perf_counter()
            a @ b
            rates.append(2 * size**3 / (time.perf_counter() - start) / 1e9)
        return statistics.median(rates)
    finally:
        torch.set_num_threads(previous)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    print(f"fp32 matmul, {args.threads} threads: {matmul_gflops(args.threads):.1f} GFLOP/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
