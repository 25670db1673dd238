"""``grpo-run docs config [--output FILE] [--check]``: the configuration reference page.

Only grpo-run's own components are documented, so the page does not depend on which third-party
plugins happen to be installed.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from grpo_run.core.errors import UserError

DEFAULT_PAGE = Path("docs/config.md")


def add_docs_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("docs", help="generate reference documentation")
    pages = p.add_subparsers(dest="page", required=True)
    config = pages.add_parser("config", help="the configuration reference (docs/config.md)")
    config.add_argument("--output", "-o", metavar="FILE",
                        help="write the page here instead of printing it (e.g. docs/config.md)")
    config.add_argument("--check", metavar="FILE", nargs="?", const=str(DEFAULT_PAGE),
                        help=f"exit 1 if FILE (default {DEFAULT_PAGE}) differs from the generated page")


def run_docs_command(args: argparse.Namespace) -> int:
    from grpo_run.cli.config_reference import render_config_reference
    from grpo_run.core.plugins.host import build_plugin_host

    text = render_config_reference(build_plugin_host(autoload=False).registry)
    if args.check:
        path = Path(args.check)
        if not path.is_file():
            raise UserError(f"{path}: no such file (generate it with: grpo-run docs config --output {path})")
        if path.read_text(encoding="utf-8") != text:
            print(f"{path} is stale: regenerate it with: grpo-run docs config --output {path}", file=sys.stderr)
            return 1
        print(f"{path}: up to date")
        return 0
    if args.output:
        Path(args.output).write_text(text, encoding="utf-8")
        print(f"wrote {args.output}")
    else:
        sys.stdout.write(text)
    return 0
