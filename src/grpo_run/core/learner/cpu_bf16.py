"""Whether bf16 autocast pays off on this CPU: a documented rule, no measurement at start.

A CPU computes bf16 matmuls natively only with AMX (``amx_bf16``) or AVX-512 BF16
(``avx512_bf16``). Without them torch converts to and from fp32 around every op and autocast adds
casts of its own: on such a CPU (e.g. this project's 2-core AVX2 machine) a learner step under
``model.autocast = "bfloat16"`` measured several times slower than in fp32
(``bench/bench_precision.py`` prints the figures for the machine it runs on).
"""

from __future__ import annotations

from pathlib import Path

FAST_BF16_FLAGS = ("amx_bf16", "avx512_bf16")
CPUINFO = Path("/proc/cpuinfo")


def cpu_flags(cpuinfo: Path = CPUINFO) -> set[str] | None:
    """The flags of the first CPU in ``/proc/cpuinfo``; None where there is no such file."""
    try:
        text = cpuinfo.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "flags":
            return set(value.split())
    return None


def slow_bf16_warning(autocast: str, device: str, flags: set[str] | None) -> str | None:
    """A one-line warning when bf16 autocast is asked for on a CPU without bf16 instructions."""
    if autocast != "bfloat16" or device != "cpu" or flags is None or flags & set(FAST_BF16_FLAGS):
        return None
    return ('model.autocast = "bfloat16" on a CPU without bf16 instructions (no amx_bf16 or avx512_bf16 in '
            '/proc/cpuinfo): learner steps are usually several times slower than in float32 here; set '
            'model.autocast = "none" (bench/bench_precision.py measures both)')
