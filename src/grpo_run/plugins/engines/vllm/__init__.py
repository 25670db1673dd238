"""The ``vllm`` generation engine (``[engine] name = "vllm"``, extra ``grpo-run[vllm]``).

Importing this package does not import vLLM: vLLM runs in the engine's worker process, possibly
under another interpreter (see :class:`VLLMEngineConfig.python` and docs/engines.md).
"""

from grpo_run.plugins.engines.vllm.config import VLLMEngineConfig
from grpo_run.plugins.engines.vllm.engine import VLLMEngine

__all__ = ["VLLMEngine", "VLLMEngineConfig"]
