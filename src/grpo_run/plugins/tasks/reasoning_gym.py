"""The ``reasoning_gym`` task: procedural problems from the reasoning-gym package, mixed by weight.

reasoning-gym (``pip install 'grpo-run[reasoning-gym]'``) generates ~100 kinds of problems
(arithmetic, logic, puzzles, games) offline, each with its own scorer. This task draws ``size``
training rows split over ``tasks`` in proportion to their weights (each task at least one row),
and ``eval_size`` eval rows the same way from another seed. Every row is scored by the
``reasoning_gym`` verifier, which calls the problem's own ``score_answer``; its ground truth is
the generated entry (question, answer, metadata); with ``verifier = "math"`` the ``math``
verifier compares against the entry's answer instead. ``options`` sets each generator's
difficulty. A row's ``dataset`` is its task name, so the ``mixture`` sampler can weigh tasks too.

Train and eval rows come from different seeds; a task with a small problem space can repeat a
problem between the two.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any, ClassVar, Literal

import attrs

EVAL_SEED_OFFSET = 1_000_003
"""Eval rows are generated with ``seed + EVAL_SEED_OFFSET``."""
DEFAULT_SYSTEM_PROMPT = (
    "Answer the question. Give your final answer between <answer> and </answer> tags, with nothing else "
    "inside them."
)


def known_tasks() -> list[str]:
    """Every dataset name reasoning-gym registers; :class:`ValueError` when it is not installed."""
    try:
        from reasoning_gym.factory import DATASETS
    except ImportError:
        raise ValueError("the reasoning_gym task needs the reasoning-gym package: "
                         "pip install 'grpo-run[reasoning-gym]'") from None
    return sorted(name for name in DATASETS if name != "composite")


def _check_tasks(_inst: Any, _attribute: attrs.Attribute, tasks: Mapping[str, float]) -> None:
    if not tasks:
        raise ValueError("name at least one reasoning-gym task, e.g. tasks = {chain_sum = 1.0}")
    bad = [f"{k} = {w!r}" for k, w in tasks.items() if not (isinstance(w, (int, float)) and math.isfinite(w) and w > 0)]
    if bad:
        raise ValueError(f"weights must be positive finite numbers; got {', '.join(bad)}")
    names = known_tasks()
    unknown = sorted(set(tasks) - set(names))
    if unknown:
        import difflib

        hints = [f"{u!r}" + (f" (did you mean {m[0]!r}?)" if (m := difflib.get_close_matches(u, names, 1)) else "")
                 for u in unknown]
        raise ValueError(f"unknown reasoning-gym tasks {', '.join(hints)}; `python -c \"import reasoning_gym.factory "
                         "as f; print(sorted(f.DATASETS))\"` lists them")


def _check_options(inst: Any, _attribute: attrs.Attribute, options: Mapping[str, Mapping[str, Any]]) -> None:
    stray = sorted(set(options) - set(inst.tasks))
    if stray:
        raise ValueError(f"options for {', '.join(map(repr, stray))}, which 'tasks' does not name")
    from reasoning_gym.factory import DATASETS

    for task, settings in options.items():
        if not isinstance(settings, Mapping):
            raise ValueError(f"options of {task!r} must be a table of its generator's settings, e.g. {{max_terms = 2}}")
        config_cls = DATASETS[task][1]
        known = {f.name for f in dataclasses.fields(config_cls)} - {"seed", "size"}
        unknown = sorted(set(settings) - known)
        if unknown:
            raise ValueError(f"{task}: unknown settings {', '.join(map(repr, unknown))}; "
                             f"{config_cls.__name__} has {', '.join(sorted(known))}")
        try:
            generator_config = config_cls(**settings)
            if hasattr(generator_config, "validate"):
                generator_config.validate()
        except (AssertionError, TypeError, ValueError) as exc:
            raise ValueError(f"{task}: {exc or 'invalid settings'}") from None


@attrs.frozen
class ReasoningGymConfig:
    """Options of the ``reasoning_gym`` task."""

    tasks: dict[str, float] = attrs.field(converter=dict, validator=_check_tasks)
    """reasoning-gym dataset name -> relative weight (its share of the rows)."""
    size: int = attrs.field(default=1000, validator=[attrs.validators.instance_of(int), attrs.validators.ge(1)])
    """Training rows in all."""
    eval_size: int = attrs.field(default=100, validator=[attrs.validators.instance_of(int), attrs.validators.ge(0)])
    """Eval rows in all (0: none)."""
    seed: int = 0
    """Seed of the generators (task ``k`` of the list uses ``seed + k``)."""
    system_prompt: str | None = DEFAULT_SYSTEM_PROMPT
    """A system message before every question (the ``reasoning_gym`` verifier looks for the answer
    in ``<answer>`` tags by default); ``""`` for none."""
    options: dict[str, dict[str, Any]] = attrs.field(factory=dict, converter=dict, validator=_check_options)
    """Generator settings per task, e.g. ``{chain_sum = {max_terms = 2, max_digits = 1}}`` (the
    fields of that task's reasoning-gym config class; the difficulty of the problems)."""
    verifier: Literal["reasoning_gym", "math"] = attrs.field(
        default="reasoning_gym", validator=attrs.validators.in_(("reasoning_gym", "math")))
    """Which verifier scores the rows: ``reasoning_gym`` (the problem's own ``score_answer``) or
    ``math`` (math-verify against the entry's ``answer``; for tasks whose answer is a number or
    an expression)."""


def split_counts(total: int, weights: Mapping[str, float]) -> dict[str, int]:
    """``total`` rows split by weight (largest remainders), each task getting at least one."""
    names = list(weights)
    share = sum(weights.values())
    exact = [total * weights[n] / share for n in names]
    counts = [max(1, math.floor(x)) for x in exact]
    order = sorted(range(len(names)), key=lambda i: exact[i] - math.floor(exact[i]), reverse=True)
    for i in order[: max(0, total - sum(counts))]:
        counts[i] += 1
    return dict(zip(names, counts, strict=True))


class ReasoningGymTask:
    """Rows from reasoning-gym's generators (see the module docstring)."""

    name: ClassVar[str] = "reasoning_gym"
    Config: ClassVar[type] = ReasoningGymConfig

    def __init__(self, config: ReasoningGymConfig) -> None:
        self.config = config

    def train_rows(self) -> list[dict[str, Any]]:
        return self._rows(self.config.size, self.config.seed, "train")

    def eval_rows(self) -> list[dict[str, Any]]:
        if not self.config.eval_size:
            return []
        return self._rows(self.config.eval_size, self.config.seed + EVAL_SEED_OFFSET, "eval")

    def _rows(self, total: int, seed: int, split: str) -> list[dict[str, Any]]:
        import reasoning_gym

        rows = []
        for k, (task, count) in enumerate(split_counts(total, self.config.tasks).items()):
            settings = self.config.options.get(task, {})
            for i, entry in enumerate(reasoning_gym.create_dataset(task, size=count, seed=seed + k, **settings)):
                rows.append(self._row(f"{task}-{split}-{i}", task, entry))
        return rows

    def _row(self, row_id: str, task: str, entry: Mapping[str, Any]) -> dict[str, Any]:
        messages = [{"role": "user", "content": entry["question"]}]
        if self.config.system_prompt:
            messages.insert(0, {"role": "system", "content": self.config.system_prompt})
        if self.config.verifier == "math":
            return {"id": row_id, "dataset": task, "messages": messages, "ground_truth": str(entry["answer"]),
                    "verifier": "math"}
        return {
            "id": row_id,
            "dataset": task,
            "messages": messages,
            "ground_truth": {"task": task, "entry": dict(entry)},
            "verifier": "reasoning_gym",
        }
