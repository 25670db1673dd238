"""``learner.max_tokens_per_forward = "auto"``: the token budget chosen where the learner runs.

The run's driver makes the memory plan (:mod:`.run_plan`) and hands each learner process a
:class:`BudgetPlan`: what the process will hold besides a micro-batch, and what a micro-batch
costs per token. Once the policy is loaded, the learner reads how much memory its device has
(:func:`device_memory`: CUDA's free memory plus what this process already holds, after the
engines are placed; on the CPU the memory available plus this process's resident set) and takes
the most tokens that fit the plan's headroom (:func:`choose_budgets`).
"""

from __future__ import annotations

import sys
from collections.abc import Callable

import attrs

from grpo_run.core.memory.plan import BUDGET_STEP, HEADROOM, ActivationCost, gib

AUTO = "auto"


@attrs.frozen
class BudgetPlan:
    """A learner process's share of the memory plan, for choosing its budgets: the device's peak
    as a function of the budgets, as the run's plan counts it (:func:`peak`)."""

    resident: float
    """Bytes on the device all along besides this process's micro-batches: its weights, optimizer
    state, reference policy, in-process engine and rollout batch, and what other processes on the
    device hold (on the CPU not counting this process's interpreter: it is measured)."""
    loaded: float
    """Of ``resident``, what this process has loaded when the budget is chosen (its policy and
    reference weights)."""
    gradients: float
    """Bytes of gradients held during a training micro-batch after a mini-batch's first."""
    train: ActivationCost
    no_grad: ActivationCost
    longest_sequence: int
    """A micro-batch holds at least one sequence: a budget below this is no smaller in practice."""
    whole_mini_batch: int
    """Tokens of one rank's share of the largest mini-batch."""
    first_gradients: float = 0.0
    """Bytes of gradients held at the peak of a mini-batch's first micro-batch (the output layer's)."""
    other_peak: float = 0.0
    """The largest phase that takes turns with the micro-batches: the optimizer step, generation
    (in this process, or an engine's beside it while training and generation take turns)."""
    limit: float | None = None
    """``learner.max_memory_gib`` in bytes: the most the plan may fill (``None``: the device's share)."""
    gathered: float = 0.0
    """Whole parameters (and gradients) a sharded strategy holds during a training forward."""
    gathered_no_grad: float = 0.0
    ranks: int = 1
    """Learner processes on this device, each with a micro-batch at the same time (CPU ranks)."""
    optimizer_state: float = 0.0
    """Of ``resident``, the optimizer state, which the first update makes."""

    def peak(self, resident: float, train_tokens: int, logprob_tokens: int, micro_batches: int = 2) -> float:
        """The plan's peak with micro-batches of ``train_tokens`` (``micro_batches`` per
        mini-batch) and no-grad passes of ``logprob_tokens`` (0: none) beside ``resident`` bytes."""
        grads = self.gradients if micro_batches > 1 else self.first_gradients
        train = grads + self.gathered + self.train.at(train_tokens)
        passes = self.no_grad.at(logprob_tokens) + self.gathered_no_grad if logprob_tokens else 0.0
        return resident + max(self.ranks * train, self.ranks * passes, self.other_peak)


@attrs.frozen
class Budgets:
    """The budgets chosen, and the line that says why."""

    train: int
    logprob: int
    line: str
    resident: float
    """What the plan held besides micro-batches when choosing (on the CPU: measured)."""


def peak_bytes(device: str) -> float:
    """The most this process has held: CUDA memory allocated by torch, or the resident set on the CPU."""
    if device.startswith("cuda"):
        import torch

        return float(torch.cuda.max_memory_allocated(torch.device(device)))
    return resident_peak_bytes()


def resident_peak_bytes() -> float:
    """This process's resident-set high-water mark, in bytes.

    Linux's ``VmHWM`` (``/proc/self/status``) belongs to the running program alone.
    ``ru_maxrss`` is only the fallback: Linux carries it over ``exec``, so a run started from a large
    process (a notebook kernel, a test worker) would report its parent's peak as its own.
    """
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return float(line.split()[1]) * 1024.0
    except OSError:
        pass
    import resource

    scale = 1.0 if sys.platform == "darwin" else 1024.0  # bytes on macOS, KiB elsewhere
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale


def device_memory(device: str) -> tuple[float, float, float]:
    """``(usable now by this process, total, already held by this process)`` in bytes."""
    if device.startswith("cuda"):
        import torch

        index = torch.device(device).index or 0
        free, total = torch.cuda.mem_get_info(index)
        held = float(torch.cuda.memory_reserved(index))
        return free + held, float(total), held
    import psutil

    held = float(psutil.Process().memory_info().rss)
    return psutil.virtual_memory().available + held, float(psutil.virtual_memory().total), held


def choose_budgets(plan: BudgetPlan, device: str, train: int | str, logprob: int | str) -> Budgets:
    """The budgets for ``train`` / ``logprob`` settings (a number is kept; ``"auto"`` is the
    largest whose peak fits what the device has now), and the plan's peak with them."""
    capacity, total, held = device_memory(device)
    if device.startswith("cuda"):
        usable = capacity - (1 - HEADROOM["cuda"]) * total
        where = f"{gib(capacity)} free on {device}"
        resident = plan.resident
    else:
        usable = HEADROOM["cpu"] * capacity
        where = f"{HEADROOM['cpu']:.0%} of {gib(capacity)} available"
        resident = plan.resident - plan.loaded + held  # what the process holds is measured
    if plan.limit is not None and plan.limit < usable:
        usable, where = plan.limit, "learner.max_memory_gib"
    whole = plan.whole_mini_batch
    fits_train = _largest(plan, lambda t: plan.peak(resident, t, 0, micro_batches=1 if t >= whole else 2) <= usable)
    fits_lp = _largest(plan, lambda t: plan.peak(resident, 0, t) <= usable)
    chosen = (fits_train or plan.longest_sequence) if train == AUTO else int(train)
    chosen_lp = (fits_lp or plan.longest_sequence) if logprob == AUTO else int(logprob)
    peak = plan.peak(resident, min(chosen or whole, whole), min(chosen_lp or whole, whole),
                     micro_batches=1 if not chosen or chosen >= whole else 2)
    if train != AUTO:
        text = f"token budget {chosen:,} tokens per forward (set)"
    elif chosen >= whole:
        text = f"token budget {chosen:,} tokens per forward: a whole mini-batch ({whole:,} tokens) fits"
    else:
        text = f"token budget {chosen:,} tokens per forward"
    line = f"{text}: about {gib(peak)} at the peak, of {gib(usable)} usable ({where})"
    if train == AUTO and not fits_train:
        line += (f"; not even one sequence of {plan.longest_sequence} tokens fits the plan, so a forward holds one "
                 "and may run out of memory (see grpo-run plan)")
    return Budgets(chosen, chosen_lp, line, resident)


def _largest(plan: BudgetPlan, fits: Callable[[int], bool]) -> int:
    """The largest budget that fits: a whole mini-batch, or a multiple of :data:`BUDGET_STEP` of
    at least one sequence, or one sequence (0 if not even one sequence fits)."""
    low, whole = min(plan.longest_sequence, plan.whole_mini_batch), plan.whole_mini_batch
    if fits(whole):
        return whole
    if not fits(low):
        return 0
    lo, hi = -(-low // BUDGET_STEP), (whole - 1) // BUDGET_STEP  # multiples of the step in between
    best = low
    while lo <= hi:
        mid = (lo + hi) // 2
        if fits(mid * BUDGET_STEP):
            best, lo = max(best, mid * BUDGET_STEP), mid + 1
        else:
            hi = mid - 1
    return best
