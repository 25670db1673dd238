"""``check_sampler``: a sampler draws the rows it was given and resumes exactly from its state."""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from typing import Any

from grpo_run.core.plugins.abilities import RewardFeedbackSampler
from grpo_run.testing._common import Reporter, check_class, default_config, short

BATCHES = (3, 5, 4)
"""Batch sizes drawn after the state is taken (the original and the restored sampler)."""


def sample_rows(count: int = 10) -> list[dict[str, Any]]:
    """``count`` distinct standard rows (``id``, ``prompt``, ``ground_truth``, ``verifier``)."""
    return [{"id": f"row-{i}", "prompt": f"{i}+1=", "ground_truth": str(i + 1), "verifier": "math"}
            for i in range(count)]


def check_sampler(cls: type, config: Any = None, rows: Sequence[Mapping[str, Any]] | None = None, *,
                  seed: int = 0) -> None:
    """Check a sampler class; :class:`AssertionError` naming the check and the value if it fails.

    :param rows: the prompt rows to sample from (default :func:`sample_rows`); each needs an
        ``id``, and no two may be equal.

    * **sample**: ``sample(n)`` returns a list of ``n`` of the given rows, for several ``n``,
      across the end of a pass over the data (``len(rows) + 2`` rows are drawn first). A
      :class:`~grpo_run.RewardFeedbackSampler` is fed ``update`` calls for those draws
      meanwhile (the first row drawn solved by its whole group, the others half-solved), so its
      state holds feedback.
    * **plain state**: ``state_dict()`` survives ``torch.save`` / ``torch.load(weights_only=True)``
      (numbers, strings, lists, dicts, tensors: what a checkpoint holds) and is a snapshot (taken
      again after more draws, the first one is unchanged).
    * **resume**: a fresh sampler built with the same config, rows and seed and loaded with the
      state draws exactly what the original draws next, batch by batch.
    """
    import torch

    report = Reporter("sampler", cls)
    check_class(cls, "sampler", report)
    config = default_config(cls, config, report)
    rows = list(rows) if rows is not None else sample_rows()
    ids = [row.get("id") for row in rows]
    if None in ids or len(set(map(str, ids))) != len(ids):
        raise report.fail("rows", "every row given to the check needs a distinct 'id'")
    original = _build(cls, config, rows, seed, report)
    drawn = _draw(original, len(rows) + 2, rows, report)
    if isinstance(original, RewardFeedbackSampler):
        try:
            for i, row in enumerate(drawn):
                original.update(str(row["id"]), [1.0, 1.0] if i == 0 else [1.0, 0.0],
                                [True, True] if i == 0 else [True, False])
        except Exception as exc:
            raise report.fail("feedback", f"update() raised {type(exc).__name__}: {exc}") from exc
    state = original.state_dict()
    buffer = io.BytesIO()
    try:
        torch.save(state, buffer)
        saved = buffer.getvalue()
        torch.load(io.BytesIO(saved), weights_only=True)
    except Exception as exc:
        raise report.fail("plain state", f"state_dict() {short(state)} does not survive torch.save/torch.load("
                                         f"weights_only=True): {type(exc).__name__}: {exc}") from exc
    expected = [[row["id"] for row in _draw(original, n, rows, report)] for n in BATCHES]
    if not _same(torch.load(io.BytesIO(saved), weights_only=True), _reload(state)):
        raise report.fail("plain state", "the dict returned by state_dict() changed as the sampler kept drawing; "
                                         "return a copy, not the sampler's live state")
    restored = _build(cls, config, rows, seed, report)
    try:
        restored.load_state_dict(torch.load(io.BytesIO(saved), weights_only=True))
    except Exception as exc:
        raise report.fail("resume", f"load_state_dict raised {type(exc).__name__}: {exc}") from exc
    for n, want in zip(BATCHES, expected, strict=True):
        got = [row["id"] for row in _draw(restored, n, rows, report)]
        if got != want:
            raise report.fail("resume", f"after load_state_dict, sample({n}) drew ids {got}; "
                                        f"the original sampler drew {want}")


def _build(cls: type, config: Any, rows: list[Mapping[str, Any]], seed: int, report: Reporter) -> Any:
    try:
        return cls(config, rows, seed)
    except Exception as exc:
        what = f"{cls.__qualname__}(config, rows, seed)"
        raise report.fail("build", f"{what} raised {type(exc).__name__}: {exc}") from exc


def _draw(sampler: Any, n: int, rows: list[Mapping[str, Any]], report: Reporter) -> list[Mapping[str, Any]]:
    try:
        batch = sampler.sample(n)
    except Exception as exc:
        raise report.fail("sample", f"sample({n}) raised {type(exc).__name__}: {exc}") from exc
    if not isinstance(batch, list) or len(batch) != n:
        got = f"{len(batch)} rows" if isinstance(batch, list) else short(batch)
        raise report.fail("sample", f"sample({n}) returned {got}, expected a list of {n} rows")
    for row in batch:
        if row not in rows:
            raise report.fail("sample", f"sample({n}) returned {short(row)}, which is not one of the given rows")
    return batch


def _reload(state: Any) -> Any:
    import torch

    buffer = io.BytesIO()
    torch.save(state, buffer)
    return torch.load(io.BytesIO(buffer.getvalue()), weights_only=True)


def _same(a: Any, b: Any) -> bool:
    """Deep equality of plain state (tensors compared with ``torch.equal``)."""
    import torch

    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and torch.equal(a, b)
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)
