"""``check_engine``: a generation engine returns well-formed groups and follows weight updates."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from grpo_run.core.plugins.abilities import Stateful, StreamingEngine
from grpo_run.core.plugins.types import Completion, EngineContext, SamplingParams
from grpo_run.testing._common import Reporter, check_class, default_config, run_sync, short

DEFAULT_PROMPTS = ("1+2=", "30+41=", "7")
"""Texts encoded with the context's tokenizer when the check is given no prompts."""
UPDATED_VERSION = 7
"""The ``version`` passed to ``update_weights``."""
FINISH_REASONS = ("stop", "length")


def check_engine(cls: type, config: Any, context: EngineContext, *, prompts: Sequence[Sequence[int]] | None = None,
                 n: int = 2, max_new_tokens: int = 6, weights: Mapping[str, Any] | None = None) -> None:
    """Check a generation engine class; :class:`AssertionError` naming the check and the value.

    :param context: what the engine is built with (model directory, tokenizer, dtype, device, seed).
    :param prompts: token-id prompts (default: :data:`DEFAULT_PROMPTS` encoded by the tokenizer).
    :param weights: the state dict passed to ``update_weights``; default: the model's own weights
        as ``transformers`` loads them from ``context.model_path``.

    * **generate**: sampled and greedy ``generate`` return one group of ``n`` per prompt, in
      order; every completion is a :class:`~grpo_run.Completion` with at least one and at most
      ``max_new_tokens`` token ids, one finite log-prob ``<= 0`` per token, a ``finish_reason``
      of ``"stop"`` or ``"length"`` (``"length"`` exactly at ``max_new_tokens``), and an int
      ``policy_version``.
    * **greedy**: greedy generation is deterministic (twice, and across a group).
    * **update_weights**: loading the same weights as ``version`` 7 leaves greedy output
      identical, and every completion generated afterwards (greedy, sampled, streamed) carries
      ``policy_version == 7``.
    * **streaming** (a :class:`~grpo_run.StreamingEngine`): ``generate_stream`` yields every
      prompt index exactly once, each with a well-formed group of ``n``.
    * **state** (a :class:`~grpo_run.Stateful` engine): a second engine loaded with the first's
      ``state_dict()`` samples exactly the completions the first samples next.

    The engine's ``close()`` is called at the end, whatever happened.
    """
    report = Reporter("engine", cls)
    check_class(cls, "engine", report)
    config = default_config(cls, config, report)
    if prompts is None:
        prompts = [list(context.tokenizer(t, add_special_tokens=False)["input_ids"]) for t in DEFAULT_PROMPTS]
    if weights is None:
        weights = _model_weights(context)
    run_sync(_check(cls, config, context, [list(p) for p in prompts], n, max_new_tokens, weights, report))


async def _check(cls: type, config: Any, context: EngineContext, prompts: list[list[int]], n: int,
                 max_new_tokens: int, weights: Mapping[str, Any], report: Reporter) -> None:
    sampled = SamplingParams(n=n, max_new_tokens=max_new_tokens, temperature=1.0)
    greedy = SamplingParams(n=n, max_new_tokens=max_new_tokens, greedy=True)
    engine = _build(cls, config, context, report)
    try:
        await _generate(engine, prompts, sampled, "generate", report)
        first = await _generate(engine, prompts, greedy, "greedy", report)
        again = await _generate(engine, prompts, greedy, "greedy", report)
        for i, group in enumerate(first):
            if len({c.token_ids for c in group}) != 1:
                raise report.fail("greedy", f"prompt {i}: the {n} greedy completions of one group differ")
        if _tokens(again) != _tokens(first):
            raise report.fail("greedy", f"greedy generation is not deterministic: {_tokens(first)} "
                                        f"then {_tokens(again)}")
        try:
            await engine.update_weights(weights, UPDATED_VERSION)
        except Exception as exc:
            raise report.fail("update_weights", f"raised {type(exc).__name__}: {exc}") from exc
        after = await _generate(engine, prompts, greedy, "update_weights", report, UPDATED_VERSION)
        if _tokens(after) != _tokens(first):
            raise report.fail("update_weights", f"greedy output changed after loading the same weights: "
                                                f"{_tokens(first)} then {_tokens(after)}")
        await _generate(engine, prompts, sampled, "update_weights", report, UPDATED_VERSION)
        if isinstance(engine, StreamingEngine):
            await _check_stream(engine, prompts, sampled, report)
        if isinstance(engine, Stateful):
            await _check_state(cls, config, context, engine, prompts, sampled, report)
    finally:
        engine.close()


def _build(cls: type, config: Any, context: EngineContext, report: Reporter) -> Any:
    try:
        return cls(config, context)
    except Exception as exc:
        raise report.fail("build", f"{cls.__qualname__}(config, context) raised {type(exc).__name__}: {exc}") from exc


async def _generate(engine: Any, prompts: list[list[int]], params: SamplingParams, check: str, report: Reporter,
                    version: int | None = None) -> list[list[Completion]]:
    try:
        groups = await engine.generate(prompts, params)
    except Exception as exc:
        raise report.fail(check, f"generate raised {type(exc).__name__}: {exc}") from exc
    if not isinstance(groups, list) or len(groups) != len(prompts):
        got = f"{len(groups)} groups" if isinstance(groups, list) else short(groups)
        raise report.fail(check, f"generate returned {got} for {len(prompts)} prompts")
    for i, group in enumerate(groups):
        _check_group(i, group, params, check, report, version)
    return groups


def _check_group(index: int, group: Any, params: SamplingParams, check: str, report: Reporter,
                 version: int | None) -> None:
    if not isinstance(group, list) or len(group) != params.n:
        got = f"{len(group)} completions" if isinstance(group, list) else short(group)
        raise report.fail(check, f"prompt {index}: got {got}, expected n={params.n}")
    for c in group:
        where = f"prompt {index}"
        if not isinstance(c, Completion):
            raise report.fail(check, f"{where}: got {short(c)}, expected a grpo_run.Completion")
        if not 1 <= len(c.token_ids) <= params.max_new_tokens:
            raise report.fail(check, f"{where}: {len(c.token_ids)} token ids, expected 1..{params.max_new_tokens}")
        if len(c.logprobs) != len(c.token_ids):
            raise report.fail(check, f"{where}: {len(c.logprobs)} log-probs for {len(c.token_ids)} tokens")
        bad = [lp for lp in c.logprobs if not (isinstance(lp, float) and math.isfinite(lp) and lp <= 0.0)]
        if bad:
            raise report.fail(check, f"{where}: log-prob {bad[0]!r} is not a finite float <= 0")
        if c.finish_reason not in FINISH_REASONS:
            raise report.fail(check, f"{where}: finish_reason {c.finish_reason!r}, expected 'stop' or 'length'")
        if c.finish_reason == "length" and len(c.token_ids) != params.max_new_tokens:
            raise report.fail(check, f"{where}: finish_reason 'length' after {len(c.token_ids)} of "
                                     f"{params.max_new_tokens} tokens")
        if not isinstance(c.policy_version, int) or (version is not None and c.policy_version != version):
            want = f"{version} (set by update_weights)" if version is not None else "an int"
            raise report.fail(check, f"{where}: policy_version {c.policy_version!r}, expected {want}")


async def _check_stream(engine: Any, prompts: list[list[int]], params: SamplingParams, report: Reporter) -> None:
    seen: list[int] = []
    try:
        async for index, group in engine.generate_stream(prompts, params):
            _check_group(index, group, params, "streaming", report, UPDATED_VERSION)
            seen.append(index)
    except AssertionError:
        raise
    except Exception as exc:
        raise report.fail("streaming", f"generate_stream raised {type(exc).__name__}: {exc}") from exc
    if sorted(seen) != list(range(len(prompts))):
        raise report.fail("streaming", f"yielded prompt indices {seen}; expected each of 0..{len(prompts) - 1} once")


async def _check_state(cls: type, config: Any, context: EngineContext, engine: Any, prompts: list[list[int]],
                       params: SamplingParams, report: Reporter) -> None:
    state = engine.state_dict()
    expected = _tokens(await _generate(engine, prompts, params, "state", report))
    twin = _build(cls, config, context, report)
    try:
        twin.load_state_dict(state)
        got = _tokens(await _generate(twin, prompts, params, "state", report))
    finally:
        twin.close()
    if got != expected:
        raise report.fail("state", f"an engine loaded with state_dict() {short(state)} sampled {got}; "
                                   f"the original sampled {expected}")


def _tokens(groups: list[list[Completion]]) -> list[list[tuple[int, ...]]]:
    return [[c.token_ids for c in group] for group in groups]


def _model_weights(context: EngineContext) -> dict[str, Any]:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(context.model_path, dtype=context.dtype)
    return model.state_dict()
