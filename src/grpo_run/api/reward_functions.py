"""Plain reward functions as verifiers: what ``grpo_run.train(cfg, reward_funcs=[f, g])`` runs.

Two signatures are accepted, told apart by the parameter names:

* TRL's: ``f(completions, **kwargs) -> list[float | None]`` -- called with a batch: ``completions``,
  ``prompts`` and every other column of the rows as a list (``ground_truth``, ``id``, ...). For chat
  rows (``messages``) a completion is ``[{"role": "assistant", "content": text}]`` and a prompt is
  the chat, as in TRL; otherwise both are strings.
* One completion at a time, by keyword: ``f(completion, ground_truth, **kwargs) -> float | None``
  (any of ``completion``, ``prompt``, ``ground_truth``, ``row`` and the row's other columns; a
  function with ``**kwargs`` gets them all). ``prompt`` is the chat for chat rows, else the text.
* ``f(completion, ground_truth, row) -> float | None`` under other parameter names: positionally.

``None`` means "no opinion on this row" (the function adds nothing to its reward). Each function
becomes a verifier named after it that scores every row (``all_rows``), with its weight and score
range. It is sent to the scoring worker processes with ``cloudpickle``, by value when it was
defined in ``__main__`` (a notebook, ``python -``, a script), so functions written interactively
run there with the usual time limit (``scoring.timeout_s``, the worker is killed when it overruns).
"""

from __future__ import annotations

import copyreg
import inspect
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

import attrs
import cloudpickle

from grpo_run.core.errors import UserError
from grpo_run.core.plugins.families import VERIFIER
from grpo_run.core.plugins.registry import ComponentRegistry, Registrar
from grpo_run.core.plugins.types import ShapingVerifierConfig, VerifierResult, check_reward_interval

CHAT_COLUMNS = ("prompt", "messages", "completion")
"""Row keys that are not passed to a TRL-style function as columns (the prompt goes as ``prompts``)."""


@attrs.frozen
class RewardFunctionConfig(ShapingVerifierConfig):
    """A reward function's options in the config (``[verifiers.<function name>]``)."""

    score_range: tuple[float, float] = attrs.field(default=(0.0, 1.0), validator=check_reward_interval)
    """The interval the function's values lie in; a value outside it counts as a failed call.
    Its top is what the function can add to a row's maximum reward."""


@attrs.frozen
class RewardFunction:
    """A plain reward function with the name, weight and score range it is used with.

    ``grpo_run.train(cfg, reward_funcs=[f, RewardFunction(g, weight=0.5, score_range=(-1, 1))])``.
    """

    fn: Callable[..., Any]
    name: str | None = None
    """Verifier name (metrics ``verifier/<name>/...``); default: the function's ``__name__``."""
    weight: float = 1.0
    score_range: tuple[float, float] = (0.0, 1.0)

    @property
    def verifier_name(self) -> str:
        name = self.name if self.name is not None else getattr(self.fn, "__name__", None)
        if not isinstance(name, str) or not name.isidentifier():
            raise UserError(f"reward function {self.fn!r} has no usable name ({name!r}); "
                            "give it one: grpo_run.RewardFunction(fn, name='my_reward')")
        return name


def call_style(fn: Callable[..., Any]) -> str:
    """``"batch"`` for TRL's ``f(completions, **kwargs)``, ``"keyword"`` for ``f(completion, ...)``
    called one completion at a time by keyword, ``"item"`` for ``f(c, gt, row)`` called positionally."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        raise UserError(f"reward function {fn!r}: cannot read its signature") from None
    names = [p.name for p in params]
    if "completions" in names:
        return "batch"
    if "completion" in names:
        return "keyword"
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if len(positional) >= 3 or any(p.kind is p.VAR_POSITIONAL for p in params):
        return "item"
    raise UserError(
        f"reward function {getattr(fn, '__name__', fn)!r} has parameters ({', '.join(names)}); use "
        "f(completions, **kwargs) -> list[float] (TRL) or f(completion, ground_truth, **kwargs) -> float"
    )


class _FunctionVerifierType(type):
    """Metaclass of the per-function verifier classes, so that pickle (and so the spawned scoring
    workers) can rebuild them from the function's cloudpickled bytes (:func:`_reduce_class`)."""


class _FunctionVerifier:
    """Base of the generated classes: a verifier that calls the unpickled function."""

    Config: ClassVar[type] = RewardFunctionConfig
    name: ClassVar[str]
    payload: ClassVar[bytes]
    """The function, cloudpickled."""

    def __init__(self, config: RewardFunctionConfig) -> None:
        self.config = config
        self.fn = cloudpickle.loads(type(self).payload)


class _ItemFunctionVerifier(_FunctionVerifier):
    def score(self, completion: str, ground_truth: Any, row: Mapping[str, Any]) -> Any:
        return _applicable_or_not(self.fn(completion, ground_truth, row))


class _KeywordFunctionVerifier(_FunctionVerifier):
    def __init__(self, config: RewardFunctionConfig) -> None:
        super().__init__(config)
        params = inspect.signature(self.fn).parameters.values()
        self._takes_all = any(p.kind is p.VAR_KEYWORD for p in params)
        self._names = {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}

    def score(self, completion: str, ground_truth: Any, row: Mapping[str, Any]) -> Any:
        prompt = row["messages"] if "messages" in row else row.get("prompt")
        args = {**{k: v for k, v in row.items() if k not in CHAT_COLUMNS},
                "completion": completion, "prompt": prompt, "ground_truth": ground_truth, "row": row}
        if not self._takes_all:
            args = {k: v for k, v in args.items() if k in self._names}
        return _applicable_or_not(self.fn(**args))


class _BatchFunctionVerifier(_FunctionVerifier):
    max_batch_size: ClassVar[int] = 64

    def score_batch(self, items: Sequence[tuple[str, Any, Mapping[str, Any]]]) -> list[Any]:
        rows = [row for _, _, row in items]
        chat = ["messages" in row for row in rows]
        completions = [[{"role": "assistant", "content": c}] if is_chat else c
                       for (c, _, _), is_chat in zip(items, chat, strict=True)]
        prompts = [row.get("messages") if is_chat else row.get("prompt") for row, is_chat in zip(rows, chat, strict=True)]
        keys = sorted({k for row in rows for k in row if k not in CHAT_COLUMNS})
        columns = {k: [row.get(k) for row in rows] for k in keys}
        columns["ground_truth"] = [gt for _, gt, _ in items]
        values = self.fn(completions=completions, prompts=prompts, **columns)
        return [_applicable_or_not(v) for v in values]


def _applicable_or_not(value: Any) -> Any:
    """``None`` -> a not-applicable result; anything else goes to the scorer's own checks."""
    if value is None:
        return VerifierResult(0.0, applicable=False)
    return value


def verifier_class(name: str, payload: bytes, style: str) -> type:
    """The verifier class of one function (also what unpickling calls in a worker)."""
    base = {"batch": _BatchFunctionVerifier, "keyword": _KeywordFunctionVerifier}.get(style, _ItemFunctionVerifier)
    return _FunctionVerifierType(f"RewardFunction[{name}]", (base,), {"name": name, "payload": payload,
                                                                       "style": style, "__module__": __name__})


def _reduce_class(cls: type) -> tuple[Any, ...]:
    return verifier_class, (cls.name, cls.payload, cls.style)  # type: ignore[attr-defined]


copyreg.pickle(_FunctionVerifierType, _reduce_class)


REWARD_MODEL = "reward_model"
"""The built-in verifier a string in ``reward_funcs`` becomes: a reward model's hub id or
directory, as TRL takes one."""


def split_reward_models(funcs: Any, weights: Sequence[float] | None) -> tuple[Any, Sequence[float] | None,
                                                                              dict[str, dict[str, Any]]]:
    """``reward_funcs`` and ``reward_weights`` without their strings (reward models), and the
    ``[verifiers.reward_model]`` table the string becomes (one at most: the verifier has one model)."""
    if isinstance(funcs, Mapping) or not funcs:
        return funcs, weights, {}
    funcs = list(funcs)
    if weights is not None and len(weights) != len(funcs):
        raise UserError(f"{len(funcs)} reward functions but {len(weights)} reward_weights")
    models = [i for i, f in enumerate(funcs) if isinstance(f, (str, os.PathLike))]
    if not models:
        return funcs, weights, {}
    if len(models) > 1:
        raise UserError(f"reward_funcs names {len(models)} reward models ({', '.join(repr(os.fspath(funcs[i])) for i in models)}); "
                        f"a run takes one ([verifiers.{REWARD_MODEL}])")
    (i,) = models
    table: dict[str, Any] = {"model": os.fspath(funcs[i])}
    if weights is not None:
        table["weight"] = float(weights[i])
    rest_weights = None if weights is None else [w for j, w in enumerate(weights) if j != i]
    return [f for j, f in enumerate(funcs) if j != i], rest_weights, {REWARD_MODEL: table}


def as_reward_functions(funcs: Sequence[Any] | Mapping[str, Any], weights: Sequence[float] | None) -> list[RewardFunction]:
    """``reward_funcs`` (callables, :class:`RewardFunction`s, or a name -> callable mapping) with
    ``reward_weights`` applied, each with a unique name."""
    items = [RewardFunction(fn, name=name) for name, fn in funcs.items()] if isinstance(funcs, Mapping) else [
        f if isinstance(f, RewardFunction) else RewardFunction(f) for f in funcs]
    if weights is not None:
        if len(weights) != len(items):
            raise UserError(f"{len(items)} reward functions but {len(weights)} reward_weights")
        items = [attrs.evolve(item, weight=float(w)) for item, w in zip(items, weights, strict=True)]
    names = [item.verifier_name for item in items]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise UserError(f"two reward functions are named {', '.join(map(repr, twice))}; "
                        "name them apart with grpo_run.RewardFunction(fn, name=...)")
    for item in items:
        if not callable(item.fn):
            raise UserError(f"reward function {item.fn!r} is not callable")
    return items


def function_verifier_classes(funcs: Sequence[RewardFunction]) -> list[type]:
    classes = []
    for item in funcs:
        style = call_style(item.fn)
        try:
            payload = cloudpickle.dumps(item.fn)
        except Exception as exc:  # e.g. it closes over a lock or an open file
            raise UserError(f"reward function {item.verifier_name!r} cannot be sent to the scoring workers "
                            f"(cloudpickle: {type(exc).__name__}: {exc}); set scoring.num_workers = 0 to run "
                            "it in the training process") from None
        classes.append(verifier_class(item.verifier_name, payload, style))
    return classes


def verifier_tables(funcs: Sequence[RewardFunction]) -> dict[str, dict[str, Any]]:
    """The ``[verifiers.<name>]`` tables the functions add to a config."""
    return {f.verifier_name: {"weight": f.weight, "score_range": list(f.score_range)} for f in funcs}


DISTRIBUTION = "<python reward functions>"
"""What ``grpo-run plugins``-style listings and error messages call the functions' origin."""


def register_reward_functions(registry: ComponentRegistry, funcs: Sequence[RewardFunction]) -> None:
    """Add each function's verifier class to ``registry``; a name a plugin already uses is an error."""
    for item in funcs:
        name = item.verifier_name
        if registry.has(VERIFIER, name):
            entry = registry.entry(VERIFIER, name)
            raise UserError(f"reward function {name!r} has the name of the {name!r} verifier of {entry.distribution!r}; "
                            "name it apart: grpo_run.RewardFunction(fn, name=...)")
    for cls in function_verifier_classes(funcs):
        Registrar(registry, VERIFIER, DISTRIBUTION, "")(cls)
