"""Built-in generation engines."""

from grpo_run import hookimpl


@hookimpl
def grpo_run_register_engines(register):
    from grpo_run.plugins.engines.hf import HFEngine

    register(HFEngine)
