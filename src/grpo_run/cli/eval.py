"""``grpo-run eval CONFIG --checkpoint DIR``: evaluate a saved checkpoint without training."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path

import structlog

from grpo_run.core.plugins.host import PluginHost


def add_eval_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("eval", help="evaluate a checkpoint on the config's eval prompts (greedy accuracy, pass@k)")
    p.add_argument("config", help="path to the TOML config (its data, verifiers, engine and [eval] are used)")
    p.add_argument("--checkpoint", required=True, metavar="DIR",
                   help="a checkpoint (step_<n>/) or any Hugging Face model directory; a run or checkpoints "
                        "directory means its newest checkpoint")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config value, e.g. --set eval.num_samples=8 (repeatable)")
    p.add_argument("--output-dir", metavar="DIR",
                   help="also write eval_metrics.json and the completions (rollouts/eval_<step>.jsonl) there")
    p.add_argument("--json", action="store_true", help="print the metrics as one JSON object")


def run_eval_command(args: argparse.Namespace, host: PluginHost) -> int:
    from grpo_run.core.config import load_config
    from grpo_run.core.loop.eval_checkpoint import evaluate_checkpoint

    cfg = load_config(args.config, host.registry, args.overrides)
    with _logs_to_stderr():
        result = evaluate_checkpoint(cfg, host, args.checkpoint, Path(args.output_dir) if args.output_dir else None)
    if args.json:
        print(json.dumps({"checkpoint": str(result.checkpoint), "step": result.step, **result.metrics}))
        return 0
    step = "" if result.step is None else f" (step {result.step})"
    print(f"{result.checkpoint}{step}")
    for key, value in result.metrics.items():
        print(f"  {key:<28} {value:.4f}")
    return 0


@contextlib.contextmanager
def _logs_to_stderr() -> Iterator[None]:
    """Warnings and errors only, on stderr, while evaluating: the metrics own stdout (``--json``
    output stays parseable)."""
    saved = structlog.get_config()
    structlog.configure(
        processors=[structlog.processors.add_log_level, structlog.dev.ConsoleRenderer(colors=False)],
        wrapper_class=structlog.make_filtering_bound_logger(30),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )
    try:
        yield
    finally:
        structlog.configure(**saved)
