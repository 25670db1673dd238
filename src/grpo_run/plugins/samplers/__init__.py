"""Built-in prompt samplers."""

from __future__ import annotations

from grpo_run import Registrar, hookimpl


@hookimpl
def grpo_run_register_samplers(register: Registrar) -> None:
    """Register the built-in prompt samplers."""
    from grpo_run.plugins.samplers.active import ActiveSampler
    from grpo_run.plugins.samplers.mixture import MixtureSampler
    from grpo_run.plugins.samplers.uniform import UniformSampler

    for sampler in (UniformSampler, MixtureSampler, ActiveSampler):
        register(sampler)
