"""grpo-run: reinforcement learning with verifiable rewards (GRPO) for language models.

The public API: everything a plugin may import. The hook markers, the family contracts and the
optional abilities (named protocols), the data components exchange, the errors a component may
raise, the pieces of the config a component's own rules look at, and the one library-version shim
engines share (:func:`cache_keyword`, from :mod:`grpo_run.core.compat`). Built-in plugins import
only from here, exactly as third-party ones do; everything under ``grpo_run.core`` is internal.
Also the Python API for notebooks and scripts: :func:`train`, :func:`load_config`, :func:`score`
and :class:`RewardFunction` (docs/python-api.md).
"""

from importlib import metadata as _metadata

from grpo_run.core.compat import cache_keyword
from grpo_run.core.config.abilities import ChecksRunConfig, TakesRunDefaults
from grpo_run.core.config.schema import RunConfig
from grpo_run.core.data.prompts import PromptRow
from grpo_run.core.errors import ConfigIssue, PluginError, RunError, UserError
from grpo_run.core.plugins.trace_records import CompletionTrace
from grpo_run.core.plugins.abilities import (
    AsyncClosable,
    BatchesRequests,
    BatchVerifier,
    CapsBatchSize,
    DeclaresScoreRange,
    DrivenEnvironment,
    LogsCompletions,
    OwnWorker,
    PlansMemory,
    RefillingSampler,
    RescalesScores,
    RewardFeedbackSampler,
    ScoreRescaler,
    ServesAdapters,
    ShapingConfig,
    Stateful,
    StreamingEngine,
    TakesAdapters,
)
from grpo_run.core.plugins.adapters import POLICY_ADAPTER, AdapterSlots, LoraAdapter
from grpo_run.core.plugins.contracts import (
    Environment,
    GenerationEngine,
    KLEstimator,
    Loss,
    ModelSource,
    Renderer,
    Sampler,
    Task,
    Tool,
    Tracker,
    Transform,
    Verifier,
)
from grpo_run.core.plugins.episodes import (
    Action,
    Chat,
    ChatTurn,
    EnvReset,
    EnvStep,
    EpisodeOver,
    EpisodeResult,
    Message,
    ParsedTurn,
    ToolCall,
    ToolError,
    ToolSchema,
)
from grpo_run.core.plugins.hookspecs import hookimpl, hookspec
from grpo_run.core.plugins.registry import Registrar
from grpo_run.core.plugins.rendering import TemplateRenderer
from grpo_run.core.secrets import looks_like_secret, mask_secrets
from grpo_run.core.plugins.types import (
    FINISH_REASON_KEY,
    NUM_TOKENS_KEY,
    REWARD_LIMIT,
    SOLVED_TOLERANCE,
    Completion,
    EngineContext,
    LossInputs,
    LossOutput,
    MemoryPart,
    MemoryRequest,
    NoConfig,
    SamplingParams,
    ShapingVerifierConfig,
    VerifierConfig,
    VerifierResult,
    check_reward_interval,
    is_solved,
    reaches,
)

from grpo_run.api import RewardFunction, SweepResult, SweepVariant, TrainResult, load_config, score, sweep, train

try:
    __version__ = _metadata.version("grpo-run")
except _metadata.PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0+unknown"

__all__ = [
    "Action",
    "AdapterSlots",
    "Chat",
    "ChatTurn",
    "DrivenEnvironment",
    "EnvReset",
    "EnvStep",
    "Environment",
    "EpisodeOver",
    "EpisodeResult",
    "Message",
    "ParsedTurn",
    "Renderer",
    "TemplateRenderer",
    "Tool",
    "ToolCall",
    "ToolError",
    "ToolSchema",
    "FINISH_REASON_KEY",
    "NUM_TOKENS_KEY",
    "REWARD_LIMIT",
    "SOLVED_TOLERANCE",
    "AsyncClosable",
    "BatchesRequests",
    "BatchVerifier",
    "CapsBatchSize",
    "ChecksRunConfig",
    "Completion",
    "CompletionTrace",
    "ConfigIssue",
    "DeclaresScoreRange",
    "EngineContext",
    "GenerationEngine",
    "KLEstimator",
    "LogsCompletions",
    "Loss",
    "LossInputs",
    "LossOutput",
    "LoraAdapter",
    "MemoryPart",
    "MemoryRequest",
    "ModelSource",
    "NoConfig",
    "OwnWorker",
    "POLICY_ADAPTER",
    "PlansMemory",
    "PluginError",
    "PromptRow",
    "RefillingSampler",
    "Registrar",
    "RescalesScores",
    "RewardFunction",
    "RewardFeedbackSampler",
    "RunConfig",
    "RunError",
    "Sampler",
    "SamplingParams",
    "ScoreRescaler",
    "ServesAdapters",
    "ShapingConfig",
    "ShapingVerifierConfig",
    "Stateful",
    "StreamingEngine",
    "SweepResult",
    "SweepVariant",
    "TakesAdapters",
    "TakesRunDefaults",
    "Task",
    "TrainResult",
    "Tracker",
    "Transform",
    "UserError",
    "Verifier",
    "VerifierConfig",
    "VerifierResult",
    "__version__",
    "cache_keyword",
    "check_reward_interval",
    "hookimpl",
    "hookspec",
    "is_solved",
    "load_config",
    "looks_like_secret",
    "mask_secrets",
    "reaches",
    "score",
    "sweep",
    "train",
]
