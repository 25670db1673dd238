"""``grpo-run sweep``: N LoRA variants of one config trained at once on one base model.

    grpo-run sweep CONFIG --vary KEY=V1,V2[,...] [--vary ...] [--set KEY=VALUE ...] [--output-dir D] [--overwrite]
    grpo-run sweep --resume D [CONFIG] [--set KEY=VALUE ...]

The product of the variations, each variant trained as the config with its values would train
alone, in ``D/<variant>/`` (a run directory like any other); ``D/sweep.json`` lists them and where
each stands (docs/lora.md). Exit 0 when every variant completed, 1 when one failed, 130 / 143
after SIGINT / SIGTERM (every variant saved), 2 for a bad config or variation.
"""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path

from rich.console import Console
from rich.table import Table
from rich.text import Text

from grpo_run.core.errors import UserError
from grpo_run.core.loop.signals import EXIT_CODES
from grpo_run.core.plugins.host import PluginHost


def add_sweep_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sweep", help="train LoRA variants of a config at once, on one base model and one engine")
    p.add_argument("config", nargs="?", help="path to the TOML config (with --resume: default, the sweep's own)")
    p.add_argument("--vary", action="append", default=[], metavar="KEY=V1,V2",
                   help="values of a key, one variant each; several --vary make their product (repeatable)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config value for every variant (repeatable)")
    p.add_argument("--output-dir", help="the sweep's directory (default: <run.output_dir>/<run.name>-sweep)")
    again = p.add_mutually_exclusive_group()
    again.add_argument("--resume", metavar="DIR", help="continue the sweep in DIR: every variant that did not complete")
    again.add_argument("--overwrite", action="store_true", help="start again in a directory holding an earlier sweep")


def run_sweep_command(args: argparse.Namespace, host: PluginHost) -> int:
    from grpo_run.core.config.loading import apply_overrides, read_toml
    from grpo_run.core.sweep.driver import run_sweep
    from grpo_run.core.sweep.manifest import SweepManifest
    from grpo_run.core.sweep.setup import prepare_sweep
    from grpo_run.core.sweep.variants import parse_vary

    overrides = list(args.overrides)
    config = args.config
    directory = Path(args.output_dir) if args.output_dir else None
    if args.resume:
        if directory is not None and directory != Path(args.resume):
            raise UserError("--resume DIR is the sweep's directory: leave --output-dir out")
        directory = Path(args.resume)
        manifest = SweepManifest.read(directory)
        config = config or manifest.config
        if config is None:
            raise UserError(f"--resume {directory}: the sweep was started from Python with a config given as data: "
                            "name its config file (grpo-run sweep --resume DIR CONFIG)")
        overrides = manifest.overrides + overrides
    elif config is None:
        raise UserError("grpo-run sweep: name a config (grpo-run sweep CONFIG --vary KEY=V1,V2)")
    vary = parse_vary(args.vary) if args.vary else None
    data = apply_overrides(read_toml(Path(config)), overrides)
    host.registry.import_dirs.append(Path(config).resolve().parent)
    prepared = prepare_sweep(data, vary, host.registry, config, directory=directory,
                             config_path=str(Path(config).resolve()), overrides=overrides,
                             resume=bool(args.resume), overwrite=args.overwrite)
    resume_line = f"resume with: {shlex.join(['grpo-run', 'sweep', '--resume', str(prepared.directory)])}"
    outcome = run_sweep(prepared.configs, prepared.runs, host, prepared.directory, prepared.manifest,
                        report_interrupted=lambda _signal: [resume_line])
    console = Console(stderr=True, highlight=False)
    print_outcome(console, prepared.manifest, prepared.directory)
    if outcome.interrupted is not None:
        console.print(Text(resume_line), soft_wrap=True)
        return EXIT_CODES.get(outcome.interrupted, 130)
    failed = [v for v in outcome.variants if v.status == "failed"]
    return 1 if failed else 0


def print_outcome(console: Console, manifest, directory: Path) -> None:
    """One table: each variant's status, steps, last reward and eval accuracy, and why it stopped."""
    from grpo_run.cli.rundir import load_metrics

    table = Table(title=f"sweep {directory}", title_justify="left")
    for column in ("variant", "status", "step", "reward/mean", "eval/accuracy"):
        table.add_column(column, justify="right" if column in ("step", "reward/mean", "eval/accuracy") else "left",
                         no_wrap=True)
    table.add_column("why (sweep.json has it whole)", no_wrap=True, overflow="ellipsis", max_width=60)
    for entry in manifest.variants:
        metrics = load_metrics(directory / entry.run_dir, required=False)
        reward, acc = (metrics.series(k)[1] for k in ("reward/mean", "eval/accuracy"))
        table.add_row(entry.name, entry.status, str(entry.step), f"{reward[-1]:.3f}" if reward else "-",
                      f"{acc[-1]:.3f}" if acc else "-", Text(entry.reason or ""))
    console.print(table)
    console.print(Text(f"report: grpo-run report {shlex.quote(str(directory))}"))
