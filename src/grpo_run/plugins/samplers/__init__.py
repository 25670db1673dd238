"""Built-in prompt samplers."""

from grpo_run import hookimpl


@hookimpl
def grpo_run_register_samplers(register):
    from grpo_run.plugins.samplers.uniform import UniformSampler

    register(UniformSampler)
