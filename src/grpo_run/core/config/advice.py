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
    env = cfg.environment
    for key in ("step_timeout_s", "episode_timeout_s"):
        limit = getattr(env, key, None) if env is not None else None
        if limit is not None and limit < TIMING_FLOOR_S:
            out.append(f"environment.{key} = {limit:g} is below what can be measured ({TIMING_FLOOR_S:g} s): a loaded "
                       f"machine's thread scheduling adds that much to a call that returns at once, so episodes may "
                       f"fail for time that was not theirs")
    return out
