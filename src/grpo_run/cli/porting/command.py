"""``grpo-run import SOURCE``: an Open Instruct command line, a ROLL ``rlvr_config`` or a TRL
``GRPOConfig`` as a commented ``config.toml``."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console
from rich.text import Text

from grpo_run.cli.porting import open_instruct, roll, trl
from grpo_run.cli.porting.sources import FRAMEWORKS, LABELS, read_peer_config
from grpo_run.cli.porting.translate import Translation, settle, translate
from grpo_run.cli.porting.writer import render
from grpo_run.core.errors import UserError
from grpo_run.core.plugins.registry import ComponentRegistry

_RULES = {"open-instruct": open_instruct, "roll": roll, "trl": trl}


def add_import_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("import", help="turn an Open Instruct, ROLL or TRL config into a commented grpo-run config")
    p.add_argument("source", help="an Open Instruct grpo_fast command line or script (.sh), a ROLL rlvr_config or "
                                  "TRL GRPOConfig YAML, or a Python file calling StreamingDataLoaderConfig(...) / "
                                  "GRPOConfig(...)")
    p.add_argument("--from", dest="framework", choices=FRAMEWORKS,
                   help="the source's framework (default: told by the file)")
    p.add_argument("--output", "-o", default="config.toml", help="where to write the config (default: config.toml)")
    p.add_argument("--force", action="store_true", help="replace the output file if it exists")


def import_config(source: Path, registry: ComponentRegistry, framework: str | None = None) -> tuple[str, Translation, list[str]]:
    """The config text imported from ``source``, its translation and the problems left to fix."""
    peer = read_peer_config(source, framework)  # type: ignore[arg-type]
    rules = _RULES[peer.framework]
    translation = translate(peer, rules.HANDLERS, rules.finish)
    problems = settle(translation, registry)
    return render(translation, problems), translation, problems


def run_import_command(args: argparse.Namespace, registry: ComponentRegistry) -> int:
    output = Path(args.output)
    if output.exists() and not args.force:
        raise UserError(f"{output} exists; choose another --output or add --force to replace it")
    text, t, problems = import_config(Path(args.source), registry, args.framework)
    try:
        output.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise UserError(f"cannot write {output}: {exc.strerror or exc}") from None
    console = Console(stderr=True, highlight=False)
    moved = len(t.settings) + sum(len(s) for s in t.sources.values())
    console.print(Text(f"wrote {output} from {args.source} ({LABELS[t.peer.framework]}): {moved} settings, "
                       f"{len(t.left_out)} with no equivalent, {len(t.by_hand)} to do by hand, {len(t.parity)} "
                       "for parity (all listed at its top)"), soft_wrap=True)
    for problem in problems:
        console.print(Text.assemble(("to fix: ", "bold yellow"), problem), soft_wrap=True)
    console.print(Text(f"next: grpo-run check {output}"), soft_wrap=True)
    return 0
