"""The curves of a run, drawn with matplotlib (Agg, no pyplot state): one PNG per panel.

A panel picks its series from ``metrics.jsonl`` by name; a panel with no data is left out and
its ``hint`` says why (e.g. entropy is only logged with ``algorithm.log_entropy``).
"""

from __future__ import annotations

import io
import re
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

import attrs

from grpo_run.cli.rundir import RunMetrics
from grpo_run.core.errors import UserError

if TYPE_CHECKING:
    from matplotlib.figure import Figure

Series = tuple[str, list[int], list[float]]

_LOCK = threading.Lock()  # matplotlib is not thread-safe; the live page renders from threads


@attrs.frozen
class Panel:
    name: str
    """File stem of the PNG."""
    title: str
    ylabel: str
    series: Callable[[RunMetrics], list[Series]]
    hint: str = ""
    """Why the panel may be empty."""


def _keys(metrics: RunMetrics, pattern: str) -> list[str]:
    return sorted(k for k in metrics.keys() if re.fullmatch(pattern, k))


def _named(*keys: str, labels: tuple[str, ...] = ()) -> Callable[[RunMetrics], list[Series]]:
    def pick(m: RunMetrics) -> list[Series]:
        return [(labels[i] if labels else k, *m.series(k)) for i, k in enumerate(keys)]
    return pick


def _matching(*patterns: str) -> Callable[[RunMetrics], list[Series]]:
    def pick(m: RunMetrics) -> list[Series]:
        return [(k, *m.series(k)) for p in patterns for k in _keys(m, p)]
    return pick


def _eval(m: RunMetrics) -> list[Series]:
    pass_keys = sorted(_keys(m, r"eval/pass@\d+"), key=lambda k: int(k.rsplit("@", 1)[1]))
    return [("eval/accuracy (greedy)", *m.series("eval/accuracy"))] + [(k, *m.series(k)) for k in pass_keys]


def _truncation(m: RunMetrics) -> list[Series]:
    return [("rollout truncation rate", *m.derived(["rollout/stop_rate"], lambda s: 1.0 - s)),
            ("eval truncation rate", *m.derived(["eval/stop_rate"], lambda s: 1.0 - s))]


def _step_time(m: RunMetrics) -> list[Series]:
    return [
        ("generation", *m.derived(["perf/generation_s", "perf/scoring_tail_s"], lambda g, s: g - s)),
        ("scoring (after generation)", *m.series("perf/scoring_tail_s")),
        ("learner", *m.series("perf/learner_s")),
        ("weight sync", *m.series("perf/sync_s")),
        ("evaluation", *m.series("perf/eval_s")),
        ("step (wall)", *m.series("perf/step_s")),
    ]


PANELS: tuple[Panel, ...] = (
    Panel("reward", "Reward", "reward", _matching(r"reward/mean", r"reward/solve_rate", r"verifier/.+/mean_score")),
    Panel("eval", "Evaluation", "accuracy", _eval,
          "no evaluation: train.local_eval_every = 0 or no eval rows (pass@k needs eval.num_samples > 0)"),
    Panel("kl", "KL divergence to the reference", "KL", _named("loss/kl", "kl/sequence_mean"),
          "no KL logged: kl.beta = 0"),
    Panel("entropy", "Policy entropy", "nats / token", _named("policy/entropy"),
          "entropy is logged with algorithm.log_entropy = true"),
    Panel("clipping", "Clip fractions", "fraction of tokens", _matching(r"loss/clip_frac_.+", r"mismatch/capped_frac"),
          "the loss reports no clip fractions"),
    Panel("lengths", "Response length", "tokens",
          _named("rollout/response_length_mean", "eval/response_length_mean", labels=("rollout", "eval"))),
    Panel("truncation", "Truncation rate (hit response_length)", "fraction", _truncation),
    Panel("batch", "Groups with a reward spread (real_batch_size_ratio)", "fraction",
          _named("rollout/real_batch_size_ratio")),
    Panel("staleness", "Staleness (learner steps behind)", "steps",
          _named("rollout/staleness_mean", "rollout/staleness_max", labels=("mean", "max"))),
    Panel("throughput", "Throughput", "tokens / s",
          _named("perf/generation_tokens_per_s", "perf/learner_tokens_per_s", labels=("generation", "learner"))),
    Panel("step_time", "Step time breakdown", "seconds", _step_time),
    Panel("loss", "Loss", "loss", _named("loss/policy", "loss/total")),
)
PANEL_NAMES = tuple(p.name for p in PANELS)


def panel(name: str) -> Panel:
    for p in PANELS:
        if p.name == name:
            return p
    raise KeyError(name)


NEEDS_MATPLOTLIB = "curves need matplotlib: pip install 'grpo-run[report]'"


def available() -> bool:
    """Whether matplotlib can be imported (the core install, ``make demo``'s, has none)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def _figure() -> Figure:
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise UserError(NEEDS_MATPLOTLIB) from None
    return Figure(figsize=(6.4, 3.4), dpi=100, layout="tight")


def _png(fig: Figure) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def render(p: Panel, metrics: RunMetrics) -> bytes | None:
    """The panel as PNG bytes, or None when none of its series has a point."""
    return render_lines(p.title, p.ylabel, p.series(metrics))


def render_lines(title: str, ylabel: str, series: list[Series]) -> bytes | None:
    """``series`` (label, steps, values) overlaid in one plot, as PNG bytes; None when none has a point."""
    lines = [s for s in series if s[1]]
    if not lines:
        return None
    with _LOCK:
        fig = _figure()
        ax = fig.add_subplot()
        for label, steps, values in lines:
            ax.plot(steps, values, label=label, marker="o" if len(steps) <= 40 else None, markersize=3, linewidth=1.4)
        from matplotlib.ticker import MaxNLocator

        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # steps are whole numbers
        ax.set_title(title, fontsize=11)
        ax.set_xlabel("step")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        if len(lines) > 1:
            ax.legend(fontsize=8)
        return _png(fig)


def placeholder(text: str) -> bytes:
    """A PNG saying ``text`` (the live page before the first step)."""
    with _LOCK:
        fig = _figure()
        fig.text(0.5, 0.5, text, ha="center", va="center", fontsize=12, color="#666666")
        return _png(fig)
