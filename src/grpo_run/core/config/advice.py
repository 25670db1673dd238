"""Warnings about a valid config: allowed (as in TRL and verl), but probably not what was meant.

:func:`config_warnings` needs no model and no torch: ``grpo-run check`` prints its lines, and a
run shows them on its console when it starts.
"""

from __future__ import annotations

from grpo_run.core.config.environment import TIMING_FLOOR_S
from grpo_run.core.config.schema import RunConfig


def config_warnings(cfg: RunConfig) -> list[str]:
    """One line per thing worth a warning in ``cfg``."""
    out = []
    warmup, total = cfg.optim.warmup_steps, cfg.train.total_steps
    if warmup > total:
        out.append(f"optim.warmup_steps = {warmup} is more than train.total_steps = {total}: the run ends during "
                   f"warm-up, with the learning rate at {total / warmup:.0%} of optim.lr")
    polyak = polyak_precision_warning(cfg)
    if polyak is not None:
        out.append(polyak)
    out += timing_floor_warnings(cfg)
    return out


SIGNIFICANT_BITS = {"float32": 24, "bfloat16": 8, "float16": 11}


def polyak_precision_warning(cfg: RunConfig) -> str | None:
    """A Polyak reference asked for in fewer significant bits than the weights it follows."""
    kl, weights = cfg.kl, cfg.model.dtype
    held = kl.reference_dtype
    if kl.beta == 0 or kl.reference != "polyak" or held == "auto" or kl.alpha == 1.0:
        return None
    if SIGNIFICANT_BITS[held] >= SIGNIFICANT_BITS[weights]:
        return None
    # Half a unit in the last place: between 2^-bits and 2^-(bits + 1) of a weight's size.
    low, high = 2.0 ** -(SIGNIFICANT_BITS[held] + 1), 2.0 ** -SIGNIFICANT_BITS[held]
    return (f'kl.reference_dtype = "{held}" with kl.reference = "polyak": each update moves a reference weight by '
            f"kl.alpha = {kl.alpha:g} times its distance to the policy, and {held} rounds away moves below "
            f"{low:.2%}-{high:.2%} of the weight, so the reference stalls where it is close to the policy; "
            f'"auto" keeps a Polyak reference in model.dtype ({weights})')


def timing_floor_warnings(cfg: RunConfig) -> list[str]:
    """An environment time limit below what can be measured on a loaded machine."""
    env, out = cfg.environment, []
    for key in ("step_timeout_s", "episode_timeout_s"):
        limit = getattr(env, key, None) if env is not None else None
        if limit is not None and limit < TIMING_FLOOR_S:
            out.append(f"environment.{key} = {limit:g} is below what can be measured ({TIMING_FLOOR_S:g} s): a loaded "
                       f"machine's thread scheduling adds that much to a call that returns at once, so episodes may "
                       f"fail for time that was not theirs")
    return out
