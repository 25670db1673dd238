# PYTHON_ARGCOMPLETE_OK  (argcomplete: completion is cheap to ask for; see docs/python-api.md)
"""The ``grpo-run`` command.

    grpo-run CONFIG.toml [--set key=value ...] [--output-dir DIR] [--resume PATH | --overwrite]   train
    grpo-run sweep CONFIG.toml --vary key=v1,v2 [...] [--output-dir D]   LoRA variants on one base model
    grpo-run check CONFIG.toml [--set key=value ...]                validate, load no model
    grpo-run plan CONFIG.toml [--device D] [--memory SIZE] [--json] the memory a run needs, by part
    grpo-run plugins                                                list plugins and components
    grpo-run docs config [--output FILE] [--check [FILE]]           the config reference page
    grpo-run new-plugin KIND NAME [DIR]                             write a plugin package
    grpo-run --version
    grpo-run eval CONFIG.toml --checkpoint DIR                      evaluate a checkpoint
    grpo-run report RUN_DIR                                         plots + report.html of a run
    grpo-run serve RUN_DIR [--port N]                               live pipeline page (localhost)
    grpo-run import SOURCE [--output config.toml]                   an Open Instruct / ROLL / TRL config

Shell completion (argcomplete): ``eval "$(register-python-argcomplete grpo-run)"``.

User mistakes print a clear message and exit 2, never a traceback. A run stopped on purpose
(a verifier that keeps failing, a full disk) exits 1; one stopped by SIGINT / SIGTERM exits 130 /
143 after saving a checkpoint and printing the command that resumes it (docs/reliability.md).
"""

from __future__ import annotations

import argparse
import faulthandler
import os
import shlex
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console
from rich.table import Table
from rich.text import Text

from grpo_run.cli.docs import add_docs_parser, run_docs_command
from grpo_run.cli.eval import add_eval_parser, run_eval_command
from grpo_run.cli.new_plugin import add_new_plugin_parser, run_new_plugin_command
from grpo_run.cli.plan import add_plan_parser, run_plan_command
from grpo_run.cli.porting.command import add_import_parser, run_import_command
from grpo_run.cli.report import add_report_parser, run_report_command
from grpo_run.cli.score import add_score_parser, run_score_command
from grpo_run.cli.serve import add_serve_parser, live_page, run_serve_command
from grpo_run.cli.sweep import add_sweep_parser, run_sweep_command
from grpo_run.core.errors import PluginInterrupted, RunError, UserError
from grpo_run.core.loop.fserrors import FS_ERRNOS
from grpo_run.core.loop.signals import RunInterrupted
from grpo_run.core.plugins.host import DISABLE_AUTOLOAD_ENV
from grpo_run.core.secrets import mask_secrets

COMMANDS = ("train", "sweep", "check", "plan", "plugins", "score", "eval", "report", "serve", "docs", "new-plugin",
            "import")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="grpo-run", description="GRPO training for language models.")
    parser.add_argument("--version", action="version", version=f"grpo-run {_version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, help_text in (("train", "train with a TOML config"), ("check", "validate a config without loading a model")):
        p = sub.add_parser(name, help=help_text)
        p.add_argument("config", help="path to the TOML config")
        p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                       help="override a config value, e.g. --set optim.lr=3e-4 (repeatable)")
        if name == "train":
            p.add_argument("--output-dir", help="run directory (default: <run.output_dir>/<run.name>)")
            again = p.add_mutually_exclusive_group()
            again.add_argument("--resume", metavar="PATH",
                               help="continue from a checkpoint, or the newest one in a run or checkpoints "
                                    "directory (the run directory defaults to the one it belongs to)")
            again.add_argument("--overwrite", action="store_true",
                               help="start again in a run directory that holds an earlier run (removes its files)")
    add_sweep_parser(sub)
    sub.add_parser("plugins", help="list plugin distributions and the components they register")
    add_score_parser(sub)
    add_eval_parser(sub)
    add_plan_parser(sub)
    add_report_parser(sub)
    add_serve_parser(sub)
    add_docs_parser(sub)
    add_new_plugin_parser(sub)
    add_import_parser(sub)
    return parser


def _version() -> str:
    from grpo_run import __version__

    return __version__


def command_words(argv: Sequence[str]) -> list[str]:
    """The words as the parser reads them: ``grpo-run config.toml`` means ``grpo-run train config.toml``."""
    words = list(argv)
    if words and words[0] not in COMMANDS and not words[0].startswith("-"):
        words.insert(0, "train")
    return words


def main(argv: Sequence[str] | None = None) -> int:
    args_list = command_words(sys.argv[1:] if argv is None else argv)
    parser = _parser()
    if "_ARGCOMPLETE" in os.environ:  # the shell asks for completions (argcomplete); answers and exits
        import argcomplete

        argcomplete.autocomplete(parser)
    args = parser.parse_args(args_list)
    # Ctrl-C (or kill -INT) stops every command even when a shell without job control started it in
    # the background, with SIGINT ignored: Python then installs no handler of its own.
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    err = Console(stderr=True, highlight=False)
    try:
        return _dispatch(args)
    except UserError as exc:
        print_problem(err, "error:", str(exc))
        return exc.exit_code
    except RunError as exc:
        print_problem(err, "run stopped:", str(exc))
        return exc.exit_code
    except RunInterrupted as exc:
        print_interrupted(err, exc, args)
        return exc.exit_code
    except OSError as exc:  # a refused write nothing closer to it named (those name their file)
        if exc.errno not in FS_ERRNOS:
            raise
        print_problem(err, "run stopped:", f"cannot write {exc.filename or 'a file'}: {exc.strerror}")
        return 1
    except KeyboardInterrupt as exc:
        err.print(Text("interrupted" + (f" {exc}" if isinstance(exc, PluginInterrupted) else "")), soft_wrap=True)
        return 130


def print_problem(console: Console, label: str, text: str) -> None:
    """``label`` in bold red, then ``text`` exactly as written (user text is never rich markup:
    a hint such as "add a table such as [verifiers.math]" must keep its brackets), secrets masked."""
    console.print(Text.assemble((label, "bold red"), " ", mask_secrets(text)), soft_wrap=True)


def print_interrupted(console: Console, exc: RunInterrupted, args: argparse.Namespace) -> None:
    """Where an interrupted run stands and the exact command that goes on with it."""
    for line in interrupted_lines(exc, args):
        console.print(Text(line), soft_wrap=True)


def interrupted_lines(exc: RunInterrupted, args: argparse.Namespace) -> list[str]:
    if exc.checkpoint is None:
        return [f"interrupted by {exc.signal_name} before the first step finished: nothing to save",
                "start again with: " + _command(args, ["--overwrite"])]
    return [f"interrupted by {exc.signal_name} after step {exc.step}: checkpoint {exc.checkpoint}",
            "resume with: " + _command(args, ["--resume", str(exc.checkpoint)])]


def _command(args: argparse.Namespace, extra: list[str]) -> str:
    """The train command the user ran (config, overrides, run directory) with ``extra`` instead
    of its --resume / --overwrite."""
    words = ["grpo-run", "train", args.config]
    for override in args.overrides:
        words += ["--set", override]
    if args.output_dir:
        words += ["--output-dir", args.output_dir]
    return shlex.join(words + extra)


def _dispatch(args: argparse.Namespace) -> int:
    from grpo_run.core.plugins.host import build_plugin_host

    if args.command == "plugins":  # list what loads, and what does not, instead of stopping
        return _print_plugins(build_plugin_host(tolerate_broken=True))
    if args.command == "report":  # reads a run directory: no plugins needed
        return run_report_command(args)
    if args.command == "serve":
        return run_serve_command(args)
    if args.command == "docs":
        return run_docs_command(args)
    if args.command == "new-plugin":
        return run_new_plugin_command(args)
    host = build_plugin_host()
    if args.command == "score":
        return run_score_command(args, host)
    if args.command == "eval":
        return run_eval_command(args, host)
    if args.command == "plan":
        return run_plan_command(args, host)
    if args.command == "sweep":
        return run_sweep_command(args, host)
    if args.command == "import":
        return run_import_command(args, host.registry)
    cfg = _load_checked(args, host)
    if args.command == "check":
        from grpo_run.cli.data_check import check_data, oversized_prompts, print_data_summary

        from grpo_run.core.config.advice import config_warnings
        from grpo_run.core.config.lora_sync import choose_lora_sync

        rows = check_data(cfg, host.registry)
        print(f"{args.config}: ok")
        for text in config_warnings(cfg):
            print_problem(Console(stderr=True, highlight=False), "warning:", text)
        if (sync := choose_lora_sync(cfg, host.registry)) is not None:
            print(f"LoRA weight sync: {sync.note or sync.mode}")
        print_data_summary(Console(highlight=False), rows, oversized_prompts(cfg, host, rows))
        return 0
    from grpo_run.core.loop.run import train
    from grpo_run.core.loop.rundir import default_run_dir, run_dir_of_resume_path

    resumed_run = run_dir_of_resume_path(args.resume) if args.resume else None
    run_dir = Path(args.output_dir) if args.output_dir else resumed_run or default_run_dir(cfg)
    _fault_stacks(run_dir)
    with live_page(run_dir, cfg.logging.dashboard_port):
        train(cfg, host, run_dir, resume_from=args.resume, overwrite=args.overwrite,
              report_interrupted=lambda exc: interrupted_lines(exc, args))
    return 0


def _fault_stacks(run_dir: Path) -> None:
    """A crash in environment or extension code (a segfault) is said in one line naming the code
    that ran, every thread's stack kept in the run directory (core/crash_watch.py); without the
    watcher, the stacks go to the process's own stderr."""
    if faulthandler.is_enabled() or sys.__stderr__ is None:
        return
    from grpo_run.core.crash_watch import start

    if start(run_dir / "crash.txt") is not None:
        return
    try:
        faulthandler.enable(file=sys.__stderr__)
    except (OSError, ValueError):  # a stderr without a file descriptor
        pass


def _load_checked(args: argparse.Namespace, host):
    """The validated config, after the model checks that need no weights (device, model
    directory), for check and train alike. Every problem at once: a config that fails validation
    also gets its model checked from its tables, and ``check`` adds the data's first error to the
    model's."""
    from grpo_run.cli.data_check import check_data
    from grpo_run.core.config import load_config
    from grpo_run.core.errors import ConfigError, ConfigIssue
    from grpo_run.core.config.loading import apply_overrides, read_toml
    from grpo_run.core.loop.preflight import check_model, raw_model_issues

    try:
        cfg = load_config(args.config, host.registry, args.overrides)
    except ConfigError as err:
        try:
            data = apply_overrides(read_toml(Path(args.config), args.config), args.overrides)
        except ConfigError:  # the file or an override is unreadable: that error is the whole story
            raise err from None
        raise ConfigError(err.source, err.issues + raw_model_issues(data, host.registry, err.issues)) from None
    issues = check_model(cfg, host.registry)
    if issues:
        if args.command == "check":
            try:
                check_data(cfg, host.registry)
            except UserError as exc:
                issues.append(ConfigIssue("data", str(exc)))
        raise ConfigError(args.config, issues)
    return cfg


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
