"""``check_task``, ``check_transform``, ``check_model_source`` and ``check_tracker``: what feeds a run
and what it reports to."""

from __future__ import annotations

import copy
import os
import tempfile
import types
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

from grpo_run.testing._common import Reporter, check_class, default_config, short

TRACKER_STEPS: tuple[tuple[int, dict[str, float]], ...] = (
    (0, {"eval/accuracy": 0.25}),
    (1, {"loss/policy": 0.5, "reward/mean": 0.75, "verifier/math/score": 1.0}),
    (2, {}),
)
"""What ``check_tracker`` logs: step 0 (the starting evaluation), an update, a step without metrics."""


def check_task(cls: type, config: Any = None, *, enabled_verifiers: Collection[str] | None = None) -> None:
    """Check a task class; :class:`AssertionError` naming the split, the row and the problem.

    :param enabled_verifiers: verifier names a row may use (e.g. the registry's); ``None`` skips
        that check.

    * **rows**: ``train_rows()`` is a non-empty sequence and ``eval_rows()`` a sequence; every
      row passes the loader's row validation (``messages`` or ``prompt``, ``ground_truth``, a
      ``verifier`` name or list of names matching the ground truths, an enabled verifier);
    * **ids**: row ids are unique within each split (samplers track prompts by id);
    * **reproducible**: a second instance built from the same config returns equal rows (a
      resumed run must see the same data).
    """
    from grpo_run.core.data.rows import DataError, normalise_row

    report = Reporter("task", cls)
    check_class(cls, "task", report)
    config = default_config(cls, config, report)
    first, second = _build(cls, (config,), report), _build(cls, (config,), report)
    for split in ("train", "eval"):
        rows = _rows(first, split, report)
        if split == "train" and not rows:
            raise report.fail("rows", "train_rows() is empty")
        ids: set[str] = set()
        for i, row in enumerate(rows):
            try:
                checked = normalise_row({"id": f"{split}-{i}", **row}, f"{split} row {i}", enabled_verifiers)
            except DataError as exc:
                raise report.fail("rows", f"{split} row {i} {short(row, 120)}: {exc}") from None
            if str(checked["id"]) in ids:
                raise report.fail("ids", f"{split} row {i}: id {checked['id']!r} is used twice")
            ids.add(str(checked["id"]))
        if list(_rows(second, split, report)) != list(rows):
            raise report.fail("reproducible", f"a second instance with the same config returned different {split} rows")


def check_transform(
    cls: type,
    config: Any = None,
    cases: Sequence[tuple[Mapping[str, Any], Mapping[str, Any] | None]] = (),
    *,
    enabled_verifiers: Collection[str] | None = None,
) -> None:
    """Check a row transform; :class:`AssertionError` naming the case and the problem.

    :param cases: ``(row, expected)`` pairs: ``row`` as the loader hands it over (standard keys
        after column mapping); ``expected`` the fields the result must have (other fields are not
        compared), or ``None`` when the transform must drop the row. At least one case.

    * **result**: a mapping or ``None`` for every case, never an exception other than the
      ``ValueError`` by which a transform rejects a row;
    * **expected**: each expected field equals the result's;
    * **rows**: a kept row passes the loader's row validation (as :func:`check_task` does);
    * **deterministic**: a second instance on a fresh copy of the row returns an equal result
      (a resumed run must see the same data).
    """
    from grpo_run.core.data.rows import DataError, normalise_row

    report = Reporter("transform", cls)
    check_class(cls, "transform", report)
    if not cases:
        raise report.fail("cases", "give at least one (row, expected) case")
    config = default_config(cls, config, report)
    first, second = _build(cls, (config,), report), _build(cls, (config,), report)
    for i, (row, expected) in enumerate(cases):
        results = []
        for transform in (first, second):
            try:
                results.append(transform(copy.deepcopy(dict(row))))
            except ValueError:
                raise  # the documented way to reject a row: the caller's case decides
            except Exception as exc:
                raise report.fail("result", f"case {i}: raised {type(exc).__name__}: {exc}") from exc
        result = results[0]
        if result is not None and not isinstance(result, Mapping):
            raise report.fail("result", f"case {i}: returned {short(result)}, expected a row mapping or None")
        if results[1] != result:
            raise report.fail("deterministic", f"case {i}: {short(result)} then {short(results[1])}")
        if expected is None:
            if result is not None:
                raise report.fail("expected", f"case {i}: expected the row to be dropped, got {short(result, 120)}")
            continue
        if result is None:
            raise report.fail("expected", f"case {i}: the row was dropped, expected {short(expected, 120)}")
        wrong = {k: result.get(k) for k, v in expected.items() if result.get(k) != v}
        if wrong:
            raise report.fail("expected", f"case {i}: got {short(wrong, 120)}, expected {short({k: expected[k] for k in wrong}, 120)}")
        try:
            normalise_row(result, "train row 0", enabled_verifiers)
        except DataError as exc:
            raise report.fail("rows", f"case {i}: the transformed row is invalid: {exc}") from None


def check_model_source(cls: type, config: Any = None) -> None:
    """Check a model source class; :class:`AssertionError` naming the problem.

    * **resolve**: ``resolve()`` returns a string naming an existing local directory;
    * **tokenizer**: ``transformers.AutoTokenizer.from_pretrained`` loads a tokenizer from it;
    * **config**: ``transformers.AutoConfig.from_pretrained`` loads the model config from it.

    A source that builds or caches its model honours its own cache setting: point it at a
    temporary directory in the test (the built-in ones read ``$GRPO_RUN_CACHE``).
    """
    report = Reporter("model", cls)
    check_class(cls, "model", report)
    config = default_config(cls, config, report)
    source = _build(cls, (config,), report)
    try:
        path = source.resolve()
    except Exception as exc:
        raise report.fail("resolve", f"resolve() raised {type(exc).__name__}: {exc}") from exc
    if not isinstance(path, str) or not Path(path).is_dir():
        raise report.fail("resolve", f"resolve() returned {short(path)}, expected the path of a local directory")
    from transformers import AutoConfig, AutoTokenizer

    for check, loader in (("tokenizer", AutoTokenizer), ("config", AutoConfig)):
        try:
            loader.from_pretrained(path)
        except Exception as exc:
            problem = f"{type(exc).__name__}: {exc}"
            raise report.fail(check, f"transformers cannot load a {check} from {path}: {problem}") from exc


def check_tracker(cls: type, config: Any = None, run_dir: str | os.PathLike[str] | None = None) -> None:
    """Check a tracker class; :class:`AssertionError` naming the call that failed.

    :param run_dir: the run directory handed to the tracker (default: a temporary directory,
        removed afterwards).

    * **log**: ``log(step, metrics)`` accepts the steps of :data:`TRACKER_STEPS`, with metrics
      as a read-only mapping (a tracker must not modify the loop's metrics);
    * **close**: ``close()`` returns normally after them.
    """
    report = Reporter("tracker", cls)
    check_class(cls, "tracker", report)
    config = default_config(cls, config, report)
    if run_dir is None:
        with tempfile.TemporaryDirectory(prefix="grpo-run-tracker-") as tmp:
            _check_tracker(cls, config, tmp, report)
    else:
        _check_tracker(cls, config, os.fspath(run_dir), report)


def _check_tracker(cls: type, config: Any, run_dir: str, report: Reporter) -> None:
    tracker = _build(cls, (config, run_dir), report)
    for step, metrics in TRACKER_STEPS:
        try:
            tracker.log(step, types.MappingProxyType(dict(metrics)))
        except Exception as exc:
            raise report.fail("log", f"log({step}, {metrics}) raised {type(exc).__name__}: {exc}") from exc
    try:
        tracker.close()
    except Exception as exc:
        raise report.fail("close", f"close() raised {type(exc).__name__}: {exc}") from exc


def _build(cls: type, args: tuple[Any, ...], report: Reporter) -> Any:
    try:
        return cls(*args)
    except Exception as exc:
        raise report.fail("build", f"{cls.__qualname__}(...) raised {type(exc).__name__}: {exc}") from exc


def _rows(task: Any, split: str, report: Reporter) -> Any:
    try:
        rows = getattr(task, f"{split}_rows")()
    except Exception as exc:
        raise report.fail("rows", f"{split}_rows() raised {type(exc).__name__}: {exc}") from exc
    if isinstance(rows, (str, bytes)) or not hasattr(rows, "__len__") or not hasattr(rows, "__getitem__"):
        raise report.fail("rows", f"{split}_rows() returned {short(rows)}, expected a sequence of rows")
    return rows
