"""The plan's vocabulary: a part of a process's memory, a process with its resident parts and
phases, and how sizes are written for a person."""

from __future__ import annotations

import attrs

GIB = 2**30


@attrs.frozen
class Part:
    """One part of a process's memory."""

    name: str
    bytes: float
    note: str = ""


@attrs.frozen
class ProcessPlan:
    """One process on one device: resident parts, and phases of which the largest counts."""

    name: str
    device: str
    resident: tuple[Part, ...]
    phases: tuple[tuple[str, tuple[Part, ...]], ...] = ()
    adds_up: tuple[str, ...] = ()
    """Phases whose memory adds to the others' instead of taking turns with them: on the CPU the
    allocator keeps what a thread freed for that thread, so generation (in its own thread) and
    the learner each keep their own peak."""
    reserves: bool = False
    """The process takes a share of its device by its own rule, margin included (vLLM)."""
    role: str = "learner"
    """``"learner"`` (a learner rank, or the trainer holding one), ``"engine"`` (an engine's own
    process) or ``"other"``: where generation and training take turns, a device holds the larger
    of its learners' and its engines' phases, not both (:meth:`RunPlan.device_peak`)."""

    @property
    def resident_bytes(self) -> float:
        return sum(p.bytes for p in self.resident)

    def phase_bytes(self, name: str) -> float:
        return sum(p.bytes for p in dict(self.phases).get(name, ()))

    @property
    def peak_phase(self) -> str | None:
        turns = [phase for phase in self.phases if phase[0] not in self.adds_up]
        if not turns:
            return None
        return max(turns, key=lambda phase: sum(p.bytes for p in phase[1]))[0]

    @property
    def phase_peak(self) -> float:
        """The largest phase, plus the phases that add up."""
        phase = self.peak_phase
        added = sum(self.phase_bytes(name) for name, _ in self.phases if name in self.adds_up)
        return (self.phase_bytes(phase) if phase else 0.0) + added

    @property
    def peak(self) -> float:
        return self.resident_bytes + self.phase_peak

    def same_as(self, other: ProcessPlan) -> bool:
        """Everything but the name and the device is equal (identical learner ranks)."""
        return (self.resident, self.phases, self.adds_up, self.role) == (other.resident, other.phases, other.adds_up, other.role)


def gib(n: float) -> str:
    """``n`` bytes as GiB for a person: ``"3.2 GiB"``."""
    return f"{n / GIB:.1f} GiB" if n >= GIB / 10 else f"{n / 2**20:.0f} MiB"


def count(n: float) -> str:
    """``7.6B``, ``135M``, ``12k``."""
    for unit, size in (("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= size:
            return f"{n / size:.1f}{unit}".replace(".0", "")
    return str(int(n))


def params_note(params: int, bytes_each: int, ranks: int = 1) -> str:
    text = f"{count(params)} params x {bytes_each} bytes"
    return text + (f" / {ranks} ranks" if ranks > 1 else "")
