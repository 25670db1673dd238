"""The ``math`` verifier (:mod:`.verifier`) and the rules it applies beyond math-verify, one module
each: which box is the answer (:mod:`.boxes`), answers without a box (:mod:`.text`), arithmetic
left to do (:mod:`.arithmetic`). Rules and their numbers: docs/verifiers.md."""

from grpo_run.plugins.verifiers.math.verifier import (
    MathVerifier,
    MathVerifierConfig,
    final_boxes,
    last_boxed,
    parse_gold,
)

__all__ = ["MathVerifier", "MathVerifierConfig", "final_boxes", "last_boxed", "parse_gold"]
