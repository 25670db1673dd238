"""``grpo-run report SWEEP_DIR``: a sweep's variants compared -- their reward and evaluation
curves overlaid, one table of where each ended -- in ``report.html`` (and a PNG per panel), beside
each variant's own report (its run directory's, as ``grpo-run report`` writes it for a run)."""

from __future__ import annotations

import base64
import html
from pathlib import Path

from grpo_run.cli.plots import NEEDS_MATPLOTLIB, render_lines
from grpo_run.cli.plots import available as plots_available
from grpo_run.cli.report import _CSS, REPORT_DIR, write_report
from grpo_run.cli.rundir import RunMetrics, latest_checkpoint, load_metrics
from grpo_run.core.sweep.manifest import SweepManifest

COMPARED = (
    ("reward", "Reward (reward/mean)", "reward", "reward/mean"),
    ("eval", "Evaluation (eval/accuracy, greedy)", "accuracy", "eval/accuracy"),
    ("solve_rate", "Solve rate (reward/solve_rate)", "fraction", "reward/solve_rate"),
    ("lengths", "Response length (rollout/response_length_mean)", "tokens", "rollout/response_length_mean"),
    ("step_time", "Step time (perf/step_s)", "seconds", "perf/step_s"),
)
"""Panels of the comparison: file stem, title, axis label, the metric overlaid for every variant."""


def write_sweep_report(directory: Path, out_dir: Path | None = None) -> Path:
    """Write the comparison of the sweep in ``directory`` (default under ``<directory>/report``)
    and each variant's own report; returns the comparison's path."""
    manifest = SweepManifest.read(directory)
    runs = {e.name: load_metrics(directory / e.run_dir, required=False) for e in manifest.variants}
    for entry in manifest.variants:
        if runs[entry.name].rows:
            write_report(directory / entry.run_dir)
    out = out_dir if out_dir is not None else directory / REPORT_DIR
    out.mkdir(parents=True, exist_ok=True)
    figures = []
    for stem, title, ylabel, key in COMPARED if plots_available() else ():
        png = render_lines(title, ylabel, [(name, *metrics.series(key)) for name, metrics in runs.items()])
        if png is not None:
            (out / f"{stem}.png").write_bytes(png)
            figures.append((stem, title, png))
    path = out / "report.html"
    path.write_text(_page(directory, manifest, runs, figures, out), encoding="utf-8")
    return path


def _page(directory: Path, manifest: SweepManifest, runs: dict[str, RunMetrics],
          figures: list[tuple[str, str, bytes]], out: Path) -> str:
    e = html.escape
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>grpo-run sweep: {e(directory.name)}</title>",
             f"<style>{_CSS}</style></head><body>", f"<h1>grpo-run sweep: {e(directory.name)}</h1>",
             f"<p>{e(str(directory.resolve()))}: {len(manifest.variants)} variants of "
             f"{e(manifest.config or 'a config given as data')}, varying "
             f"{e('; '.join(f'{k} over {vs}' for k, vs in manifest.vary.items()))}</p>",
             _table(directory, manifest, runs, out), "<h2>Curves</h2><div class='grid'>"]
    for stem, title, png in figures:
        data = base64.b64encode(png).decode("ascii")
        parts.append(f"<figure id='{e(stem)}'><img alt='{e(title)}' src='data:image/png;base64,{data}'></figure>")
    parts.append("</div>")
    if not plots_available():
        parts.append(f"<p class='missing'>No curves: {e(NEEDS_MATPLOTLIB)}.</p>")
    parts.append("</body></html>")
    return "\n".join(parts)


def _table(directory: Path, manifest: SweepManifest, runs: dict[str, RunMetrics], out: Path) -> str:
    e = html.escape
    columns = ("variant", "values", "status", "steps", "reward/mean (last)", "eval/accuracy (last)",
               "eval/accuracy (best)", "last checkpoint", "why it stopped")
    rows = ["<tr>" + "".join(f"<th>{c}</th>" for c in columns) + "</tr>"]
    for entry in manifest.variants:
        metrics = runs[entry.name]
        reward = metrics.series("reward/mean")[1]
        acc = metrics.series("eval/accuracy")[1]
        checkpoint = latest_checkpoint(directory / entry.run_dir)
        own = directory / entry.run_dir / REPORT_DIR / "report.html"
        name = e(entry.name)
        if own.is_file():
            name = f"<a href='{e(_relative(own, out))}'>{name}</a>"
        cells = [name, e(", ".join(f"{k}={v}" for k, v in entry.overrides.items())), e(entry.status),
                 str(entry.step), f"{reward[-1]:.4g}" if reward else "-", f"{acc[-1]:.4g}" if acc else "-",
                 f"{max(acc):.4g}" if acc else "-", e(str(checkpoint) if checkpoint else "none"), e(entry.reason or "")]
        rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    return "<table>" + "".join(rows) + "</table>"


def _relative(path: Path, start: Path) -> str:
    import os

    return os.path.relpath(path, start)
