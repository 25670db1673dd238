"""Rollout traces: every completion of a step (or an evaluation) as JSON lines under
``<run_dir>/rollouts/``, so a run can be judged by what the model wrote.

``rollouts/step_<n>.jsonl`` every ``logging.log_rollouts_every`` steps (the batch step ``n``
trained on, filtered groups included) and ``rollouts/eval_<n>.jsonl`` at each evaluation; one
:class:`~grpo_run.CompletionTrace` per line. A file holds at most ``logging.max_rollout_bytes``;
records past the cap are left out and counted in ``log.jsonl``. Trackers that can show tables
(:class:`~grpo_run.LogsCompletions`) receive the same records.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from grpo_run.core.loop.fserrors import write_text_atomically, writing
from grpo_run.core.loop.observers import StepEvent
from grpo_run.core.plugins.abilities import LogsCompletions
from grpo_run.core.plugins.trace_records import CompletionTrace
from grpo_run.core.rollout.episodes import Episode
from grpo_run.core.runlog import get_logger

ROLLOUTS_DIR = "rollouts"

Decode = Callable[[Sequence[int]], str]


def trace_path(run_dir: Path, kind: str, step: int) -> Path:
    """``rollouts/step_<n>.jsonl`` (train) or ``rollouts/eval_<n>.jsonl``."""
    return Path(run_dir) / ROLLOUTS_DIR / f"{'step' if kind == 'train' else 'eval'}_{step}.jsonl"


class TraceWriter:
    """Writes capped trace files and hands what it wrote to the table-showing trackers.

    :param every: ``logging.log_rollouts_every`` (0: write nothing).
    :param decode: token ids -> text (the run's tokenizer), for the prompts.
    :param sinks: trackers with :class:`~grpo_run.LogsCompletions`.
    :param on_sink_error: ``(tracker, exception)`` of a sink that raised (it is never fatal).
    """

    def __init__(
        self,
        run_dir: Path,
        every: int,
        max_bytes: int,
        decode: Decode,
        sinks: Sequence[LogsCompletions] = (),
        on_sink_error: Callable[[Any, Exception], None] | None = None,
    ) -> None:
        self.run_dir = Path(run_dir)
        self.every = every
        self.max_bytes = max_bytes
        self.decode = decode
        self.sinks = list(sinks)
        self.on_sink_error = on_sink_error

    @property
    def enabled(self) -> bool:
        return self.every > 0

    def write(self, kind: str, step: int, traces: Sequence[CompletionTrace]) -> Path:
        """Write ``traces`` (up to the size cap) atomically; returns the file's path."""
        path = trace_path(self.run_dir, kind, step)
        with writing(path.parent, "the rollout traces directory"):
            path.parent.mkdir(parents=True, exist_ok=True)
        lines, size = [], 0
        for trace in traces:
            line = json.dumps(trace.to_json(), ensure_ascii=False) + "\n"
            if size + len(line.encode("utf-8")) > self.max_bytes:
                break
            lines.append(line)
            size += len(line.encode("utf-8"))
        if len(lines) < len(traces):
            get_logger().warning("rollout_trace_truncated", path=str(path), written=len(lines),
                                 left_out=len(traces) - len(lines), max_rollout_bytes=self.max_bytes)
        # A reader (the live page) never sees half a file; a full disk leaves no temporary file.
        write_text_atomically(path, "".join(lines), "rollout traces")
        self._to_sinks(step, kind, list(traces[: len(lines)]))
        return path

    def _to_sinks(self, step: int, kind: str, traces: list[CompletionTrace]) -> None:
        for sink in self.sinks:
            try:
                sink.log_completions(step, kind, traces)
            except Exception as exc:  # a tracker never stops training
                if self.on_sink_error is not None:
                    self.on_sink_error(sink, exc)


def train_traces(event: StepEvent, decode: Decode) -> list[CompletionTrace]:
    """One record per completion of the batch step ``event.step`` trained on."""
    batch, signal = event.batch, event.signal
    if batch is None:
        return []
    out = []
    for gi, group in enumerate(batch.groups):
        prompt = decode(group.prompt_ids)
        kept = True if signal is None else bool(signal.keep[gi])
        for ci, comp in enumerate(group.completions):
            out.append(CompletionTrace(
                kind="train", step=event.step, row_id=str(group.row.get("id", "")), group=gi, sample=ci,
                prompt=prompt, completion=comp.text, ground_truth=group.row.get("ground_truth"),
                reward=float(group.rewards[ci]), max_reward=float(group.max_reward),
                solved=bool(group.solved[ci]),
                scores=dict(group.scores[ci]) if group.scores else {},
                finish_reason=comp.finish_reason, num_tokens=len(comp.token_ids),
                policy_version=comp.policy_version,
                advantage=None if signal is None else float(signal.advantages[gi, ci]),
                filtered=not kept,
                turns=episode_spans(comp, decode) if isinstance(comp, Episode) else None,
            ))
    return out


def episode_spans(episode: Episode, decode: Decode) -> tuple[dict[str, object], ...]:
    """An episode's completion ids as runs of one role and one mask, decoded."""
    spans: list[dict[str, object]] = []
    turn = 0
    for k, seg in enumerate(episode.segments):
        mask = seg.loss_mask(episode.train_on_env_tokens)
        start = 0
        for i in range(1, len(seg.completion_ids) + 1):
            if i == len(seg.completion_ids) or (seg.roles[i], mask[i]) != (seg.roles[start], mask[start]):
                span: dict[str, object] = {"segment": k, "role": seg.roles[start], "trained": bool(mask[start]),
                                           "text": decode(seg.completion_ids[start:i])}
                if seg.roles[start] == "assistant" and turn < len(episode.turn_versions):
                    span["policy_version"] = episode.turn_versions[turn][0]  # the version that sampled the turn
                    turn += 1
                spans.append(span)
                start = i
    return tuple(spans)


class RolloutTraces:
    """The observer: writes ``rollouts/step_<n>.jsonl`` every ``writer.every`` steps."""

    def __init__(self, writer: TraceWriter) -> None:
        self.writer = writer

    def on_step(self, event: StepEvent) -> None:
        w = self.writer
        if w.enabled and event.batch is not None and event.step % w.every == 0:
            w.write("train", event.step, train_traces(event, w.decode))

    def on_run_end(self, status: str, error: BaseException | None) -> None:
        pass
