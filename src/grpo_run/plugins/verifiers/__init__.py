"""Built-in verifiers plugin (registered through the grpo_run entry point 'verifiers')."""

from __future__ import annotations

from grpo_run import Registrar, hookimpl
from grpo_run.plugins.verifiers.code import CodeVerifier
from grpo_run.plugins.verifiers.format import FormatVerifier
from grpo_run.plugins.verifiers.ifeval import IFEvalVerifier
from grpo_run.plugins.verifiers.judge import JudgeVerifier
from grpo_run.plugins.verifiers.length import LengthVerifier
from grpo_run.plugins.verifiers.math import MathVerifier
from grpo_run.plugins.verifiers.non_stop_penalty import NonStopPenaltyVerifier
from grpo_run.plugins.verifiers.reasoning_gym import ReasoningGymVerifier
from grpo_run.plugins.verifiers.reward_model import RewardModelVerifier


@hookimpl
def grpo_run_register_verifiers(register: Registrar) -> None:
    """Register the built-in verifiers."""
    register(MathVerifier)
    register(CodeVerifier)
    register(FormatVerifier)
    register(LengthVerifier)
    register(NonStopPenaltyVerifier)
    register(JudgeVerifier)
    register(IFEvalVerifier)
    register(ReasoningGymVerifier)
    register(RewardModelVerifier)
