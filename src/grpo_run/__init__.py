"""grpo-run: reinforcement learning with verifiable rewards (GRPO) for language models.

The public API for plugin authors: the hook markers, the component contracts and the data types
components exchange. Everything under ``grpo_run.core`` that is not re-exported here is internal.
"""

from grpo_run.core.plugins.contracts import (
    FINISH_REASON_KEY,
    NUM_TOKENS_KEY,
    Completion,
    EngineContext,
    GenerationEngine,
    KLEstimator,
    Loss,
    LossInputs,
    LossOutput,
    ModelSource,
    NoConfig,
    Sampler,
    SamplingParams,
    ShapingVerifierConfig,
    Task,
    Tracker,
    Verifier,
    VerifierConfig,
    VerifierResult,
)
from grpo_run.core.plugins.hookspecs import hookimpl, hookspec
from grpo_run.core.plugins.registry import Registrar

__version__ = "0.1.0"

__all__ = [
    "FINISH_REASON_KEY",
    "NUM_TOKENS_KEY",
    "Completion",
    "EngineContext",
    "GenerationEngine",
    "KLEstimator",
    "Loss",
    "LossInputs",
    "LossOutput",
    "ModelSource",
    "NoConfig",
    "Registrar",
    "Sampler",
    "SamplingParams",
    "ShapingVerifierConfig",
    "Task",
    "Tracker",
    "Verifier",
    "VerifierConfig",
    "VerifierResult",
    "hookimpl",
    "hookspec",
    "__version__",
]
