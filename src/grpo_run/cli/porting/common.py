"""Rules every import shares: a warm-up given as a ratio, a pack length that holds the longest
sequence, and a verifier for the rows."""

from __future__ import annotations

from typing import Any

from grpo_run.cli.porting.translate import Setting, Translation

ROUTED_VERIFIERS = ("math", "ifeval", "code", "judge", "reasoning_gym")
"""Built-in verifiers that check a row's answer (the others shape every row's reward)."""


def take_warmup_ratio(t: Translation, path: str, value: Any) -> bool:
    """Kept for :func:`finish_common`: a ratio of the steps needs the number of steps."""
    t.later["warmup_ratio"] = Setting(float(value), t.written(path, value))
    return True


def finish_common(t: Translation) -> None:
    ratio = t.later.pop("warmup_ratio", None)
    if ratio is not None and not t.has("optim.warmup_steps"):
        steps = t.get("train.total_steps", 100)
        t.set("optim.warmup_steps", round(ratio.value * steps), f"{ratio.origin} x {steps} steps")
    prompt = t.get("data.max_prompt_token_length", 256)
    response = t.get("rollout.response_length", 32)
    if t.get("algorithm.pack_length", 512) < prompt + response:
        given = t.settings.pop("algorithm.pack_length", None)
        t.set("algorithm.pack_length", prompt + response,
              (f"{given.origin}, raised: " if given else "needed: ") +
              "a packed row holds at least data.max_prompt_token_length + rollout.response_length")
    _a_verifier_for_the_rows(t)
    if not t.has("model.name_or_path"):
        t.by_hand.append(("model", f"{t.label}'s source names no model: set model.name_or_path (grpo-run's default "
                                   "is its tiny arithmetic model)"))


def enabled_verifiers(t: Translation) -> list[str]:
    names: list[str] = []
    for path in t.settings:
        if path.startswith("verifiers."):
            name = path.split(".")[1]
            if name not in names:
                names.append(name)
    return names


def _a_verifier_for_the_rows(t: Translation) -> None:
    routed = [name for name in enabled_verifiers(t) if name in ROUTED_VERIFIERS]
    if not routed and t.get("scoring.row_verifiers", True):
        t.set("verifiers.math", {}, f"stands in: {t.label}'s source names no answer-checking reward")
        t.by_hand.append(("[verifiers.math]", "stands in for the reward: enable the verifiers that check your "
                                              "rows' answers and name them in each source (data.train.verifier)"))
        routed = ["math"]
    if len(routed) == 1:
        for which in ("train", "eval"):
            if t.sources[which] and not any("verifier" in s for s in t.sources[which]):
                t.set(f"data.{which}.verifier", routed[0], "the one verifier that checks answers", keep=True)
