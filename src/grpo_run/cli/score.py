"""``grpo-run score INPUT.jsonl --output OUTPUT.jsonl [--config CONFIG.toml]``: offline scoring.

Reward debugging without a model: every input row (a JSON object per line with ``prompt`` or
``messages``, ``completion``, ``ground_truth`` and ``verifier``, plus any other fields; optionally
``finish_reason`` and ``num_tokens``) goes through the same :class:`RewardScorer` the training loop
uses. Each output row is the input row plus ``reward`` (the combined reward), ``scores`` (verifier
-> its own score) and ``error`` where a verifier failed. A summary table per verifier follows.

With ``--config``, only the config's ``[verifiers.*]`` and ``[scoring]`` tables are read (the
rest of a training config may be there and is ignored); without it, every verifier the input names
is enabled with its default options and scores only the rows that name it. The error-rate stop of
training is off here: failed verifications are what this command is for. A row that cannot be
scored (invalid JSON, a missing field, a verifier that is not there) is an error on that row: its
output line has ``error`` (``line N: ...``), the summary lists it, the other rows are scored. Exit
0 once rows are scored, 2 when none can be, or for an unusable file or config (the message names
the file and line).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs
import structlog
from cattrs.errors import ClassValidationError
from rich import box
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from grpo_run.core.config.converter import make_converter, structure_components
from grpo_run.core.config.formatting import issues_from_exception, with_key
from grpo_run.core.config.loading import read_toml
from grpo_run.core.config.schema import ScoringSection
from grpo_run.core.errors import ConfigError, ConfigIssue, UnknownComponentError, UserError
from grpo_run.core.plugins.families import VERIFIER
from grpo_run.core.plugins.registry import ComponentRegistry
from grpo_run.core.scoring.metrics import ScoringMetrics
from grpo_run.core.scoring.scorer import RewardScorer, ScoredCompletion

REQUIRED_FIELDS = ("completion", "ground_truth", "verifier")
"""Fields every input row needs, besides ``prompt`` or ``messages``."""
BATCH_ROWS = 256
"""Rows per ``RewardScorer.score`` call (and per progress-bar update)."""
SHOWN_ERRORS = 5
"""Failed rows listed after the summary table."""

Row = dict[str, Any]
Problems = dict[int, tuple[Any, str]]
"""Rows that cannot be scored: line number -> (the parsed row, or None, and what is wrong)."""


def add_score_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``score`` sub-command to ``grpo-run``'s sub-parsers; returns its parser."""
    parser = subparsers.add_parser(
        "score",
        help="score completions in a JSONL file with the verifiers (reward debugging)",
        description=__doc__.split("\n\n")[1] if __doc__ else None,
    )
    parser.add_argument("input", help="JSONL file: prompt, completion, ground_truth, verifier per row")
    parser.add_argument("--output", "-o", required=True, help="JSONL file to write (replaced atomically)")
    parser.add_argument("--config", help="TOML config whose [verifiers.*] and [scoring] tables to use")
    parser.add_argument("--workers", type=int, help="worker processes (default: scoring.num_workers)")
    parser.add_argument("--timeout", type=float, help="per-call time limit in seconds (default: scoring.timeout_s)")
    return parser


def run_score_command(args: argparse.Namespace, host: Any) -> int:
    """Run ``grpo-run score`` with parsed ``args``; returns the exit code (errors are printed)."""
    err = Console(stderr=True, highlight=False)
    try:
        return _score_file(args, host.registry, err)
    except UserError as exc:
        err.print(f"[bold red]error:[/] {escape(str(exc))}", soft_wrap=True)
        return exc.exit_code


def _score_file(args: argparse.Namespace, registry: ComponentRegistry, err: Console) -> int:
    source = str(args.input)
    lines, rows, problems = read_rows(Path(args.input), source)
    if args.config is not None:
        specs, scoring = configured_verifiers(Path(args.config), registry)
    else:
        specs, scoring = default_verifiers(rows, lines, registry, source, problems), ScoringSection()
    check_rows_enabled(rows, lines, specs, args.config, problems)
    usable = [(line, row) for line, row in zip(lines, rows, strict=True) if line not in problems]
    if not usable:
        line, (_, message) = min(problems.items())
        more = f" (and {len(problems) - 1} more unusable rows)" if len(problems) > 1 else ""
        raise UserError(f"{source}:{line}: {message}{more}")
    lines, rows = [line for line, _ in usable], [row for _, row in usable]
    overrides: dict[str, Any] = {"max_error_rate": 1.0, "max_logged_errors": 0}
    if args.workers is not None:
        overrides["num_workers"] = _checked(args.workers, args.workers >= 0, "--workers must be >= 0")
    if args.timeout is not None:
        overrides["timeout_s"] = _checked(args.timeout, args.timeout > 0, "--timeout must be > 0")
    saved_logging = structlog.get_config()
    _quiet_logging()
    try:
        scorer = RewardScorer.from_config(scoring, specs, **overrides)
        try:
            results, metrics = asyncio.run(_score_all(scorer, rows, lines, source, err))
        finally:
            scorer.close()
    finally:
        structlog.configure(**saved_logging)
    scored = {line: _output_row(r, s) for line, r, s in zip(lines, rows, results, strict=True)}
    for line, (row, message) in problems.items():
        scored[line] = _unscored_row(row, line, message)
    write_rows_atomically(Path(args.output), [scored[line] for line in sorted(scored)])
    out = Console(highlight=False, width=None if sys.stdout.isatty() else 120)
    print_summary(out, rows, lines, results, metrics, scorer, args.output, problems)
    return 0


def _checked(value: Any, ok: bool, message: str) -> Any:
    if not ok:
        raise UserError(message)
    return value


# -- input -----------------------------------------------------------------------------------------


def read_rows(path: Path, source: str) -> tuple[list[int], list[Row], Problems]:
    """(line numbers, rows, problems) of a JSONL file: the rows that parse and have the required
    fields, and what is wrong with each other line. An unreadable or empty file is a :class:`UserError`."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UserError(f"{source}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"{source}: cannot read: {exc}") from None
    lines, rows, problems = [], [], {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            problems[number] = (None, f"invalid JSON: {exc.msg} (column {exc.colno})")
            continue
        try:
            check_row(row, "")
        except UserError as exc:
            problems[number] = (row, str(exc).removeprefix(": "))
            continue
        lines.append(number)
        rows.append(row)
    if not rows and not problems:
        raise UserError(f"{source}: no rows to score (the file is empty)")
    return lines, rows, problems


def check_row(row: Any, where: str) -> None:
    """A usable input row: an object with the required fields of the right types."""
    if not isinstance(row, dict):
        raise UserError(f"{where}: expected a JSON object, got {type(row).__name__}")
    missing = [f for f in REQUIRED_FIELDS if f not in row]
    if "prompt" not in row and "messages" not in row:
        missing.insert(0, "prompt")
    if missing:
        raise UserError(f"{where}: missing field{'s' if len(missing) > 1 else ''} {', '.join(map(repr, missing))}")
    if not isinstance(row["completion"], str):
        raise UserError(f"{where}: 'completion' must be a string, got {type(row['completion']).__name__}")
    names = row["verifier"]
    if isinstance(names, list):
        if not names or not all(isinstance(n, str) for n in names):
            raise UserError(f"{where}: 'verifier' must be a name or a non-empty list of names, got {names!r}")
        gold = row["ground_truth"]
        if not (isinstance(gold, list) and len(gold) == len(names)):
            raise UserError(
                f"{where}: 'verifier' lists {len(names)} names, so 'ground_truth' must be a list of {len(names)}"
            )
    elif not isinstance(names, str):
        raise UserError(f"{where}: 'verifier' must be a name or a list of names, got {names!r}")


def _names(row: Row) -> list[str]:
    return row["verifier"] if isinstance(row["verifier"], list) else [row["verifier"]]


def default_verifiers(
    rows: list[Row], lines: list[int], registry: ComponentRegistry, source: str, problems: Problems
) -> dict[str, tuple[type, Any]]:
    """Every verifier the rows name, with its default config; each scores only the rows that name
    it. A row naming an unknown verifier goes to ``problems``."""
    specs: dict[str, tuple[type, Any]] = {}
    for row, line in zip(rows, lines, strict=True):
        for name in _names(row):
            if name in specs:
                continue
            try:
                cls = registry.get("verifier", name)
            except UnknownComponentError as exc:
                problems.setdefault(line, (row, str(exc)))
                continue
            try:
                config = cls.Config()
                if getattr(config, "all_rows", False):  # without a config, rows get what they name
                    config = attrs.evolve(config, all_rows=False)
                specs[name] = (cls, config)
            except (TypeError, ValueError) as exc:
                raise UserError(
                    f"{source}:{line}: verifier {name!r} has no usable default options ({exc}); "
                    f"pass --config with a [verifiers.{name}] table"
                ) from None
    return specs


def configured_verifiers(path: Path, registry: ComponentRegistry) -> tuple[dict[str, tuple[type, Any]], ScoringSection]:
    """The ``[verifiers.*]`` and ``[scoring]`` tables of a config file, structured and validated
    as a training run would (other tables are not looked at)."""
    source = os.fspath(path)
    data = read_toml(path, source)
    if not data.get("verifiers"):
        issue = ConfigIssue("verifiers", "no verifier enabled; add a table such as [verifiers.math]")
        raise ConfigError(source, [issue])
    converter = make_converter(registry)
    errors: list[Exception] = []
    configs: dict[str, Any] = {}
    scoring = ScoringSection()
    try:
        configs = structure_components(converter, registry, VERIFIER, data["verifiers"])
    except (ClassValidationError, ValueError, TypeError) as exc:
        errors.append(with_key(exc, "verifiers"))
    try:
        scoring = converter.structure(data.get("scoring", {}), ScoringSection)
    except (ClassValidationError, ValueError, TypeError) as exc:
        errors.append(with_key(exc, "scoring"))
    if errors:
        raise ConfigError(source, issues_from_exception(ClassValidationError("while structuring", errors, dict)))
    return {name: (registry.get("verifier", name), conf) for name, conf in configs.items()}, scoring


def check_rows_enabled(
    rows: list[Row], lines: list[int], specs: Mapping[str, Any], config: str | None, problems: Problems
) -> None:
    """Rows naming a verifier ``specs`` lacks go to ``problems``."""
    for row, line in zip(rows, lines, strict=True):
        missing = [name for name in _names(row) if name not in specs]
        if missing and line not in problems:
            problems[line] = (row, f"verifier {missing[0]!r} is not enabled in {config}; "
                                   f"enabled: {', '.join(specs)} (add a [verifiers.{missing[0]}] table)")


# -- scoring ---------------------------------------------------------------------------------------


async def _score_all(
    scorer: RewardScorer, rows: list[Row], lines: list[int], source: str, err: Console
) -> tuple[list[ScoredCompletion], dict[str, float]]:
    progress = None
    if len(rows) > BATCH_ROWS and sys.stderr.isatty():
        progress = Progress(
            TextColumn("[bold]scoring"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            console=err, transient=True,
        )
        task = progress.add_task("score", total=len(rows))
        progress.start()
    results: list[ScoredCompletion] = []
    stats = ScoringMetrics()
    try:
        for start in range(0, len(rows), BATCH_ROWS):
            batch = [
                {**row, "id": row.get("id", f"{source}:{line}")}
                for row, line in zip(rows[start : start + BATCH_ROWS], lines[start : start + BATCH_ROWS], strict=True)
            ]
            scored = await scorer.score(batch, [row["completion"] for row in batch])
            results.extend(scored)
            stats.merge(scored.stats)
            if progress is not None:
                progress.update(task, completed=len(results))
    finally:
        if progress is not None:
            progress.stop()
        await scorer.aclose()
    return results, stats.report()


def _quiet_logging() -> None:
    """Warnings and errors only, to stderr: the summary owns stdout."""
    structlog.configure(
        processors=[structlog.processors.add_log_level, structlog.dev.ConsoleRenderer(colors=False)],
        wrapper_class=structlog.make_filtering_bound_logger(30),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )


# -- output ----------------------------------------------------------------------------------------


def _output_row(row: Row, result: ScoredCompletion) -> Row:
    out = {**row, "reward": result.reward, "scores": dict(result.scores)}
    if result.error is not None:
        out["error"] = result.error
    return out


def _unscored_row(row: Any, line: int, message: str) -> Row:
    """The output line of an input line that could not be scored."""
    fields = row if isinstance(row, dict) else {}
    return {**fields, "reward": 0.0, "scores": {}, "error": f"line {line}: {message}"}


def write_rows_atomically(path: Path, rows: list[Row]) -> None:
    """Write JSONL to a temporary file beside ``path``, then rename it over ``path``."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with tmp.open("w", encoding="utf-8") as fh:
            for row in rows:
                fh.write(json.dumps(row, ensure_ascii=False) + "\n")
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise UserError(f"{path}: cannot write the output: {exc.strerror or exc}") from None


def print_summary(
    console: Console,
    rows: list[Row],
    lines: list[int],
    results: list[ScoredCompletion],
    metrics: Mapping[str, float],
    scorer: RewardScorer,
    output: str,
    problems: Problems | None = None,
) -> None:
    table = Table(title="scores per verifier", box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("verifier", no_wrap=True)
    for column in ("rows", "scored", "mean", "correct", "errors", "timeouts", "p50 ms", "p95 ms"):
        table.add_column(column, justify="right", no_wrap=True)
    for name in scorer.enabled:
        prefix = f"verifier/{name}/"
        if prefix + "calls" not in metrics:
            continue
        table.add_row(
            name,
            *(_fmt(metrics.get(prefix + key), spec) for key, spec in (
                ("calls", ".0f"), ("count", ".0f"), ("mean_score", ".3f"), ("correct_rate", ".3f"),
                ("errors", ".0f"), ("timeouts", ".0f"), ("latency_p50_ms", ".2f"), ("latency_p95_ms", ".2f"),
            )),
        )
    console.print(table)
    failed = [(line, r.error) for line, r in zip(lines, results, strict=True) if r.error is not None]
    unscored = sorted((problems or {}).items())
    for line, (_, message) in unscored[:SHOWN_ERRORS]:
        console.print(f"  line {line}: not scored: {escape(message)}", soft_wrap=True)
    if len(unscored) > SHOWN_ERRORS:
        console.print(f"  ... and {len(unscored) - SHOWN_ERRORS} more rows not scored")
    for line, error in failed[:SHOWN_ERRORS]:
        console.print(f"  line {line}: {escape(error or '')}", soft_wrap=True)
    if len(failed) > SHOWN_ERRORS:
        console.print(f"  ... and {len(failed) - SHOWN_ERRORS} more rows with an 'error' field")
    mean = sum(r.reward for r in results) / len(results)
    console.print(
        f"scored {len(rows)} rows -> {escape(str(output))}: mean reward {mean:.4f} "
        f"(max possible {scorer.max_possible_score:g}), {len(failed)} with errors"
        + (f"; {len(unscored)} rows not scored (error on their line)" if unscored else "")
    )


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)
