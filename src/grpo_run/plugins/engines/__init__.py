"""Built-in generation engines."""

from grpo_run import hookimpl


@hookimpl
def grpo_run_register_engines(register):
    from grpo_run.plugins.engines.hf import HFEngine
    from grpo_run.plugins.engines.vllm import VLLMEngine

    register(HFEngine)
    register(VLLMEngine)
