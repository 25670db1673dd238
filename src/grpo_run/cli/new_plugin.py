"""``grpo-run new-plugin KIND NAME [DIR]``: a ready-to-install plugin distribution.

It writes ``pyproject.toml`` (with the ``grpo_run`` entry point), one working component of the
family ``KIND`` called ``NAME`` with its attrs ``Config``, the registration hook, tests that call
``grpo_run.testing``'s contract check for that family, a README and ``example.toml``, a short run
of the embedded arithmetic task that uses the component (for environments, renderers and tools:
episodes of the shipped char model). The templates are in
``plugin_templates/`` next to this module (``string.Template``: ``$name``, ``$cls`` ...).
"""

from __future__ import annotations

import argparse
import re
import string
from importlib import resources
from pathlib import Path
from typing import Any

import grpo_run
from grpo_run.core.config.toml_writer import dumps_toml
from grpo_run.core.errors import UserError
from grpo_run.core.plugins.families import FAMILIES, family

_NAME = re.compile(r"^[a-z][a-z0-9]*([_-][a-z0-9]+)*$")
KINDS = tuple(f.key for f in FAMILIES if resources.files("grpo_run.cli").joinpath("plugin_templates", f"{f.key}.py.tmpl").is_file())
"""Families with a package template (every family has one; a new family needs its two templates)."""

EXAMPLE_RUN: dict[str, Any] = {
    "model": {"name_or_path": "tiny-arithmetic"},
    "task": {"name": "arithmetic"},
    "data": {"max_prompt_token_length": 16},
    "rollout": {"num_unique_prompts_rollout": 16, "num_samples_per_prompt_rollout": 8, "response_length": 8},
    "optim": {"lr": 3e-4, "warmup_steps": 5},
    "train": {"total_steps": 30, "local_eval_every": 5},
    "logging": {"progress": True},
    "verifiers": {"math": {"weight": 1.0}},
}
"""The embedded default, shortened; each kind puts its component into it (:func:`example_run`)."""

EXAMPLE_SOLUTIONS = "".join(
    f'{{"prompt": "{a}+{b}", "ground_truth": "{a} plus {b} makes {a + b}"}}\n' for a in range(12) for b in range(12)
)
"""Rows with worked solutions for a transform's example run (written as ``example.jsonl``)."""

USAGE = {
    "verifier": "Enable it in a run config with a table `[verifiers.$name]` (options: `weight`, "
                "`case_sensitive`, `strip`, and `mode`, `gate_fail_reward`, `all_rows`); rows name it in "
                "their `verifier` column (or a data source sets `verifier = \"$name\"`), or `all_rows = true` "
                "scores every row.",
    "loss": "Choose it with `[loss] name = \"$name\"` (option: `clip`).",
    "kl": "Choose it with `[kl] name = \"$name\"` and a `beta > 0` (option: `clamp`).",
    "sampler": "Choose it with `[sampler] name = \"$name\"` (option: `shuffle`).",
    "engine": "Choose it with `[engine] name = \"$name\"` (option: `max_batch_size`).",
    "task": "Choose it with `[task] name = \"$name\"` (options: `max_operand`, `num_eval`, `seed`, `verifier`).",
    "model": "Choose it with `[model] name_or_path = \"$name\"`; it resolves to `$$$env_var` or `~/models/$name`.",
    "tracker": "Enable it with a table `[trackers.$name]` (options: `filename`, `prefixes`).",
    "transform": "Apply it to a data source: `transform = \"$name\"` in a `[[data.train]]` table "
                 "(option: `on_missing`).",
    "environment": "Choose it with `[environment] name = \"$name\"` (options: `wrong_answer_cost`, `hints`, "
                   "`system_prompt`, beside the core keys such as `max_turns` and `max_tokens_per_turn`) and a "
                   "renderer for the model's chat format: `[renderer] name = \"tiny-chat\"` for grpo-run's "
                   "shipped char model, `\"chat-template\"` for a Hugging Face chat model.",
    "renderer": "Choose it with `[renderer] name = \"$name\"` in a run with an `[environment]` (option: "
                "`separator`); tools are offered by the environment (`[tools.<name>]` tables).",
    "tool": "Enable it with a table `[tools.$name]` (options: `digits`, `max_value`); an environment that "
            "offers tools, such as the built-in `tools` environment (`[environment] name = \"tools\"`), "
            "hands it to the model.",
}


def add_new_plugin_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("new-plugin", help="write a ready-to-install plugin package")
    p.add_argument("kind", metavar="KIND", help=f"the component family: {', '.join(KINDS)}")
    p.add_argument("name", metavar="NAME", help="the component's name, e.g. my-verifier")
    p.add_argument("dir", metavar="DIR", nargs="?", help="where to write it (default ./grpo-run-NAME)")


def run_new_plugin_command(args: argparse.Namespace) -> int:
    dest = write_plugin(args.kind, args.name, Path(args.dir) if args.dir else None)
    article = "an" if args.kind[0] in "aeiou" else "a"
    print(f"wrote {dest}: {article} {args.kind} plugin '{args.name}'")
    print(f"next: pip install -e '{dest}[test]' && pytest {dest} && grpo-run {dest / 'example.toml'}")
    return 0


def names_for(kind: str, name: str) -> dict[str, str]:
    """The template's placeholders for component ``name`` of family ``kind``."""
    snake = name.replace("-", "_")
    camel = "".join(part.capitalize() for part in re.split(r"[-_]", name))
    suffix = {"kl": "KL"}.get(kind, kind.capitalize())
    package = f"grpo_run_{snake}"
    return {
        "name": name,
        "kind": kind,
        "dist": f"grpo-run-{name.replace('_', '-')}",
        "package": package,
        "module": kind,
        "cls": camel if camel.endswith(suffix) else camel + suffix,
        "hook": family(kind).hook,
        "env_var": f"{package.upper()}_PATH",
        "grpo_run_version": _release(grpo_run.__version__),
    }


def write_plugin(kind: str, name: str, dest: Path | None = None) -> Path:
    """Write the package for component ``name`` of family ``kind`` into ``dest``; returns ``dest``."""
    if kind not in KINDS:
        raise UserError(f"new-plugin: unknown kind {kind!r}; kinds: {', '.join(KINDS)}")
    if not _NAME.match(name):
        raise UserError(f"new-plugin: the name {name!r} must be lower-case letters and digits, words joined "
                        "by '-' or '_', starting with a letter (e.g. my-verifier)")
    values = names_for(kind, name)
    dest = dest if dest is not None else Path(values["dist"])
    if dest.exists() and any(dest.iterdir()):
        raise UserError(f"new-plugin: {dest} exists and is not empty; choose another DIR")
    files = {
        "pyproject.toml": _render("pyproject.toml.tmpl", values),
        "README.md": _render("README.md.tmpl", {**values, "usage": _fill(USAGE[kind], values)}),
        f"src/{values['package']}/__init__.py": _render("__init__.py.tmpl", values),
        f"src/{values['package']}/{kind}.py": _render(f"{kind}.py.tmpl", values),
        f"tests/test_{values['package']}.py": _render(f"test_{kind}.py.tmpl", values),
        "example.toml": _example_header(values) + dumps_toml(example_run(kind, name)),
    }
    if kind == "transform":
        files["example.jsonl"] = EXAMPLE_SOLUTIONS
    for relative, text in files.items():
        path = dest / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return dest


def example_run(kind: str, name: str) -> dict[str, Any]:
    """:data:`EXAMPLE_RUN` with the component ``name`` of family ``kind`` in it."""
    run = {"run": {"name": name}, **{key: dict(value) for key, value in EXAMPLE_RUN.items()}}
    if kind == "verifier":  # the task's rows name "math": score them all with the new verifier instead
        run["verifiers"] = {"math": {"weight": 0.0}, name: {"weight": 1.0, "all_rows": True}}
    elif kind in ("loss", "sampler", "engine", "task"):
        run[kind] = {"name": name}
    elif kind == "kl":
        run["kl"] = {"name": name, "beta": 0.01}
    elif kind == "model":
        run["model"] = {"name_or_path": name}
    elif kind == "tracker":
        run["trackers"] = {name: {}}
    elif kind == "transform":  # a data source instead of the task: rows with worked solutions
        del run["task"]
        run["data"] = {**run["data"], "train": [{"path": "example.jsonl", "transform": name, "verifier": "math"}]}
        run["train"] = {**run["train"], "local_eval_every": 0}
    elif kind in ("environment", "renderer", "tool"):  # episodes of the char model ("tiny-chat" is its format)
        run["rollout"] = {**run["rollout"], "response_length": 24}  # all turns and answers of an episode
        if kind == "environment":
            run["environment"] = {"name": name, "max_turns": 3, "max_tokens_per_turn": 6}
            run["renderer"] = {"name": "tiny-chat"}
        else:  # the built-in `tools` environment offers the tool(s)
            run["environment"] = {"name": "tools", "max_turns": 2, "max_tokens_per_turn": 8}
            run["renderer"] = {"name": name if kind == "renderer" else "tiny-chat"}
            run["tools"] = {name if kind == "tool" else "calculator": {}}
    return run


def _example_header(values: dict[str, str]) -> str:
    note = (f"# Needs {values['env_var']} set to a model directory with grpo-run's character tokenizer\n"
            "# (e.g. grpo-run's shipped tiny-arithmetic checkpoint).\n") if values["kind"] == "model" else ""
    note += EPISODE_NOTES.get(values["kind"], "")
    return (f"# A short run of grpo-run's embedded arithmetic task with the `{values['name']}` {values['kind']}.\n"
            f"{note}# Run: grpo-run example.toml --output-dir runs/{values['name']}\n\n")


EPISODE_NOTES = {
    "environment": "# Each problem is an episode: a wrong answer is told `higher`/`lower` and tries again\n"
                   "# (env/turns_mean in metrics.jsonl is above 1 while the model still errs).\n",
    "renderer": "# Each problem is an episode of the built-in `tools` environment offering the calculator,\n"
                "# rendered by this renderer (the shipped model answers directly; it was never taught calls).\n",
    "tool": "# Each problem is an episode of the built-in `tools` environment offering this tool (the\n"
            "# shipped model answers directly; it was never taught calls: see docs/environments.md).\n",
}


def _render(template: str, values: dict[str, str]) -> str:
    return _fill(resources.files("grpo_run.cli").joinpath("plugin_templates", template).read_text("utf-8"), values)


def _fill(text: str, values: dict[str, str]) -> str:
    return string.Template(text).substitute(values)


def _release(version: str) -> str:
    """``0.2.0`` from ``0.2.0.dev3+g123`` (a source tree says ``0+unknown``: no lower bound worth naming)."""
    match = re.match(r"^(\d+(\.\d+)*)", version)
    return match.group(1) if match and version != "0+unknown" else "0"
