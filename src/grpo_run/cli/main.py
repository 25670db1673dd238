"""The ``grpo-run`` command.

    grpo-run CONFIG.toml [--set key=value ...] [--output-dir DIR] [--resume PATH]   train
    grpo-run check CONFIG.toml [--set key=value ...]                validate, load no model
    grpo-run plugins                                                list plugins and components
    grpo-run eval CONFIG.toml --checkpoint DIR                      evaluate a checkpoint
    grpo-run report RUN_DIR                                         plots + report.html of a run
    grpo-run serve RUN_DIR [--port N]                               live pipeline page (localhost)

User mistakes print a clear message and exit 2, never a traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console
from rich.table import Table
from rich.text import Text

from grpo_run.core.errors import RunError, UserError
from grpo_run.core.plugins.host import DISABLE_AUTOLOAD_ENV
from grpo_run.cli.score import add_score_parser, run_score_command
from grpo_run.cli.eval import add_eval_parser, run_eval_command
from grpo_run.cli.report import add_report_parser, run_report_command
from grpo_run.cli.serve import add_serve_parser, live_page, run_serve_command

COMMANDS = ("train", "check", "plugins", "score", "eval", "report", "serve")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="grpo-run", description="GRPO training for language models.")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, help_text in (("train", "train with a TOML config"), ("check", "validate a config without loading a model")):
        p = sub.add_parser(name, help=help_text)
        p.add_argument("config", help="path to the TOML config")
        p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                       help="override a config value, e.g. --set optim.lr=3e-4 (repeatable)")
        if name == "train":
            p.add_argument("--output-dir", help="run directory (default: <run.output_dir>/<run.name>)")
            p.add_argument("--resume", metavar="PATH",
                           help="continue from a checkpoint, or the newest one in a run or checkpoints "
                                "directory (the run directory defaults to the one it belongs to)")
    sub.add_parser("plugins", help="list plugin distributions and the components they register")
    add_score_parser(sub)
    add_eval_parser(sub)
    add_report_parser(sub)
    add_serve_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list and args_list[0] not in COMMANDS and not args_list[0].startswith("-"):
        args_list.insert(0, "train")  # `grpo-run config.toml` means train
    args = _parser().parse_args(args_list)
    err = Console(stderr=True, highlight=False)
    try:
        return _dispatch(args)
    except UserError as exc:
        print_problem(err, "error:", str(exc))
        return exc.exit_code
    except RunError as exc:
        print_problem(err, "run stopped:", str(exc))
        return exc.exit_code
    except KeyboardInterrupt:
        err.print("interrupted")
        return 130


def print_problem(console: Console, label: str, text: str) -> None:
    """``label`` in bold red, then ``text`` exactly as written (user text is never rich markup:
    a hint such as "add a table such as [verifiers.math]" must keep its brackets)."""
    console.print(Text.assemble((label, "bold red"), " ", text), soft_wrap=True)


def _dispatch(args: argparse.Namespace) -> int:
    from grpo_run.core.plugins.host import build_plugin_host

    if args.command == "plugins":  # list what loads, and what does not, instead of stopping
        return _print_plugins(build_plugin_host(tolerate_broken=True))
    if args.command == "report":  # reads a run directory: no plugins needed
        return run_report_command(args)
    if args.command == "serve":
        return run_serve_command(args)
    host = build_plugin_host()
    if args.command == "score":
        return run_score_command(args, host)
    if args.command == "eval":
        return run_eval_command(args, host)
    from grpo_run.core.config import load_config

    cfg = load_config(args.config, host.registry, args.overrides)
    if args.command == "check":
        print(f"{args.config}: ok")
        return 0
    from grpo_run.core.loop.checkpoint import find_checkpoint
    from grpo_run.core.loop.run import default_run_dir, run_dir_of_checkpoint, train

    resumed_run = run_dir_of_checkpoint(find_checkpoint(args.resume)) if args.resume else None
    run_dir = Path(args.output_dir) if args.output_dir else resumed_run or default_run_dir(cfg)
    with live_page(run_dir, cfg.logging.dashboard_port):
        train(cfg, host, run_dir, resume_from=args.resume)
    return 0


def _print_plugins(host) -> int:
    console = Console(width=120)
    dists = Table(title="plugin distributions")
    dists.add_column("distribution")
    dists.add_column("version")
    for name, version in host.distributions():
        dists.add_row(name, version)
    console.print(dists)
    comps = Table(title="components")
    for col in ("family", "name", "distribution", "class"):
        comps.add_column(col)
    for entry in host.registry:
        comps.add_row(entry.family.key, entry.name, entry.distribution, f"{entry.cls.__module__}.{entry.cls.__qualname__}")
    console.print(comps)
    if host.broken:
        broken = Table(title="broken plugins (skipped)")
        for col in ("entry point", "distribution", "version", "error"):
            broken.add_column(col, overflow="fold")
        for b in host.broken:
            broken.add_row(b.entry_point, b.distribution, b.version, Text(b.error))
        console.print(broken)
        console.print(Text(f"Other commands stop on a broken plugin; set {DISABLE_AUTOLOAD_ENV}=1 to run "
                           "without third-party plugins."))
    return 0


if __name__ == "__main__":
    sys.exit(main())
