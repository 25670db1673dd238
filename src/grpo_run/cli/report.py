"""``grpo-run report RUN_DIR``: the run's curves as PNG files and one self-contained
``report.html`` (the same images inline), with sample completions from the rollout traces."""

from __future__ import annotations

import argparse
import base64
import html
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from grpo_run.cli.plots import NEEDS_MATPLOTLIB, PANELS, render
from grpo_run.cli.plots import available as plots_available
from grpo_run.cli.rundir import RunMetrics, latest_checkpoint, load_metrics, read_jsonl, trace_files
from grpo_run.core.secrets import mask_secrets

REPORT_DIR = "report"
SAMPLES = 5
HEADLINE = ("reward/mean", "reward/solve_rate", "eval/accuracy", "rollout/response_length_mean",
            "perf/generation_tokens_per_s", "perf/step_s", "perf/elapsed_s")

_CSS = """
body{font-family:system-ui,sans-serif;margin:24px;color:#222;max-width:1400px}
h1{font-size:22px}h2{font-size:18px;margin-top:28px}
.grid{display:grid;grid-template-columns:repeat(auto-fill,minmax(480px,1fr));gap:12px}
figure{margin:0;border:1px solid #ddd;border-radius:6px;padding:6px;background:#fff}
figure img{width:100%;height:auto;display:block}
table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ddd;padding:4px 8px;text-align:left;vertical-align:top}
pre{white-space:pre-wrap;word-break:break-word;margin:0;font-size:12px}
.missing{color:#777;font-size:13px}
.turn{border-left:3px solid #ccc;padding-left:6px;margin:2px 0}.turn.assistant{border-color:#4a8}
.role{font-size:11px;color:#666}
"""


def add_report_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("report", help="plots and an HTML report of a run directory, or of a sweep's variants")
    p.add_argument("run_dir", help="a run directory (holding metrics.jsonl), or a sweep's (holding sweep.json)")
    p.add_argument("--output-dir", help=f"where report.html and the PNGs go (default: RUN_DIR/{REPORT_DIR})")


def run_report_command(args: argparse.Namespace) -> int:
    from grpo_run.cli.sweep_report import write_sweep_report
    from grpo_run.core.sweep.manifest import is_sweep

    directory, out_dir = Path(args.run_dir), Path(args.output_dir) if args.output_dir else None
    out = (write_sweep_report if is_sweep(directory) else write_report)(directory, out_dir)
    print(f"wrote {out}" + ("" if plots_available() else f" without curves ({NEEDS_MATPLOTLIB})"))
    return 0


def write_report(run_dir: Path, out_dir: Path | None = None) -> Path:
    """Write the PNGs and ``report.html`` (default under ``<run_dir>/report``); returns its path.
    Without matplotlib the page has everything but the curves, and says how to get them. A report
    that fails leaves no empty directory behind."""
    metrics = load_metrics(run_dir)
    out = out_dir if out_dir is not None else run_dir / REPORT_DIR
    created = not out.exists()
    out.mkdir(parents=True, exist_ok=True)
    try:
        return _write(run_dir, metrics, out)
    except BaseException:
        if created and not any(out.iterdir()):
            out.rmdir()
        raise


def _write(run_dir: Path, metrics: RunMetrics, out: Path) -> Path:
    figures, missing = [], []
    drawn = plots_available()
    for p in PANELS if drawn else ():
        png = render(p, metrics)
        if png is None:
            missing.append((p.title, p.hint))
            continue
        (out / f"{p.name}.png").write_bytes(png)
        figures.append((p.name, p.title, png))
    page = _page(run_dir, metrics, figures, missing, drawn)
    path = out / "report.html"
    path.write_text(page, encoding="utf-8")
    return path


def _page(run_dir: Path, metrics: RunMetrics, figures: Sequence[tuple[str, str, bytes]],
          missing: Sequence[tuple[str, str]], drawn: bool = True) -> str:
    e = html.escape
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>grpo-run report: {e(run_dir.name)}</title>",
             f"<style>{_CSS}</style></head><body>",
             f"<h1>grpo-run report: {e(run_dir.name)}</h1>", _overview(run_dir, metrics), "<h2>Curves</h2><div class='grid'>"]
    for name, title, png in figures:
        data = base64.b64encode(png).decode("ascii")
        parts.append(f"<figure id='{e(name)}'><img alt='{e(title)}' src='data:image/png;base64,{data}'></figure>")
    parts.append("</div>")
    if not drawn:
        parts.append(f"<p class='missing'>No curves: {e(NEEDS_MATPLOTLIB)} (the table above has each "
                     "headline metric's last value; metrics.jsonl has every step).</p>")
    if missing:
        parts.append("<p class='missing'>Not in this run: " + "; ".join(
            f"{e(title)} ({e(hint)})" if hint else e(title) for title, hint in missing) + "</p>")
    parts.append(_samples(run_dir))
    config = run_dir / "config.toml"
    if config.is_file():
        parts.append(f"<h2>Config</h2><details><summary>config.toml</summary><pre>{e(mask_secrets(config.read_text()))}</pre></details>")
    parts.append("</body></html>")
    return "\n".join(parts)


def _overview(run_dir: Path, metrics: RunMetrics) -> str:
    e = html.escape
    last = metrics.last
    rows = [("run directory", str(run_dir.resolve())), ("steps", str(last.get("step", 0)))]
    checkpoint = latest_checkpoint(run_dir)
    rows.append(("last checkpoint", str(checkpoint) if checkpoint else "none"))
    for key in HEADLINE:
        steps, values = metrics.series(key)
        if values:
            rows.append((f"{key} (step {steps[-1]})", f"{values[-1]:.4g}"))
    return "<table>" + "".join(f"<tr><th>{e(k)}</th><td>{e(v)}</td></tr>" for k, v in rows) + "</table>"


def _samples(run_dir: Path) -> str:
    train, evals = trace_files(run_dir, "train"), trace_files(run_dir, "eval")
    if not train and not evals:
        return ("<h2>Sample completions</h2><p class='missing'>No rollout traces in this run: set "
                "logging.log_rollouts_every to write rollouts/step_&lt;n&gt;.jsonl.</p>")
    parts = ["<h2>Sample completions</h2>"]
    if train:
        step, path = list(train.items())[-1]
        records = sorted(read_jsonl(path), key=lambda r: r.get("reward", 0.0))
        parts.append(f"<h3>Training step {step}: best</h3>" + _table(_one_per_prompt(records[::-1])))
        parts.append(f"<h3>Training step {step}: worst</h3>" + _table(_one_per_prompt(records)))
    if evals:
        step, path = list(evals.items())[-1]
        greedy = [r for r in read_jsonl(path) if r.get("greedy")]
        failed = [r for r in greedy if not r.get("solved")]
        what = "greedy episodes unsolved" if any(r.get("turns") for r in greedy) else "greedy answers wrong"
        parts.append(f"<h3>Evaluation after step {step}: {len(failed)} of {len(greedy)} {what}</h3>"
                     + _table(failed[:SAMPLES] or greedy[:SAMPLES]))
    return "\n".join(parts)


def _one_per_prompt(records: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The first :data:`SAMPLES` records of distinct prompts (a group's completions often tie)."""
    seen, out = set(), []
    for r in records:
        if r.get("row_id") not in seen:
            seen.add(r.get("row_id"))
            out.append(r)
    return out[:SAMPLES]


def _completion(record: Mapping[str, Any]) -> str:
    """The completion cell: the text, or an episode's turns one per line with their role and
    whether they trained (sampled ids) or were masked (environment text, template scaffolding)."""
    e = html.escape
    turns = record.get("turns")
    if not turns:
        return f"<pre>{e(str(record.get('completion', '')))}</pre>"
    lines = []
    for span in turns:
        mask = "trained" if span.get("trained") else "masked"
        lines.append(f"<div class='turn {e(str(span.get('role', '')))}'><span class='role'>"
                     f"{e(str(span.get('role', '')))} · {mask}</span><pre>{e(str(span.get('text', '')))}</pre></div>")
    return "".join(lines)


def _table(records: Sequence[Mapping[str, Any]]) -> str:
    e = html.escape
    columns = ("prompt", "completion", "ground truth", "reward", "scores", "advantage", "finish")
    head = "<tr>" + "".join(f"<th>{c}</th>" for c in columns) + "</tr>"
    rows = []
    for r in records:
        adv = r.get("advantage")
        rows.append(
            f"<tr><td><pre>{e(str(r.get('prompt', '')))}</pre></td><td>{_completion(r)}</td>"
            f"<td>{e(str(r.get('ground_truth')))}</td><td>{float(r.get('reward', 0.0)):.3f}</td>"
            f"<td>{e(', '.join(f'{k}={v:.3g}' for k, v in (r.get('scores') or {}).items()))}</td>"
            f"<td>{'' if adv is None else f'{adv:+.3f}'}{' (filtered)' if r.get('filtered') else ''}</td>"
            f"<td>{e(str(r.get('finish_reason', '')))}</td></tr>"
        )
    return f"<table>{head}{''.join(rows)}</table>"
