"""Reading a peer framework's configuration: an Open Instruct (or TRL) command line or shell
script, a Python call with keyword arguments (``StreamingDataLoaderConfig(...)``,
``GRPOConfig(...)``), or a YAML file (ROLL's ``rlvr_config``, TRL's ``trl grpo --config``).

Each becomes a :class:`PeerConfig`: which framework, and its settings as ``(key path, value)``
pairs in the order written, nested tables flattened into paths (``actor_train.training_args.
learning_rate``) except those the peer tables treat as one value (``rewards``).
"""

from __future__ import annotations

import ast
import re
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import attrs

from grpo_run.core.config.peer_tables import lookup
from grpo_run.core.errors import UserError

Framework = Literal["open-instruct", "roll", "trl"]
FRAMEWORKS: tuple[Framework, ...] = ("open-instruct", "roll", "trl")
LABELS: dict[str, str] = {"open-instruct": "Open Instruct grpo_fast", "roll": "ROLL rlvr_config", "trl": "TRL GRPOConfig"}

_OPEN_INSTRUCT_CALLS = {"StreamingDataLoaderConfig", "GRPOExperimentConfig", "Args", "VLLMConfig", "ModelConfig",
                        "TokenizerConfig", "ExperimentConfig"}
_TRL_CALLS = {"GRPOConfig", "ScriptArguments", "GRPOScriptArguments"}
_LIST_ARGS = {"dataset_mixer_list", "dataset_mixer_eval_list", "dataset_mixer_list_splits",
              "dataset_mixer_eval_list_splits", "dataset_transform_fn", "stop_strings", "num_learners_per_node",
              "oe_eval_tasks", "tools", "lora_target_modules", "reward_funcs", "reward_weights", "report_to"}
"""Command-line arguments that take several values (``nargs="+"``): a list even with one value."""
_INTERPOLATION = re.compile(r"^\$\{([A-Za-z0-9_.]+)\}$")


class ImportSourceError(UserError):
    """The file cannot be read as any of the supported configurations."""


@attrs.frozen
class PeerConfig:
    framework: Framework
    settings: tuple[tuple[str, Any], ...]
    """``(dotted key path, value)`` in the order written."""
    source: str
    style: Literal["argv", "kwargs", "yaml"]
    """How the file wrote them: ``--name value``, ``name=value`` or ``a.b: value``."""


def read_peer_config(path: Path, framework: Framework | None = None) -> PeerConfig:
    """The settings of the configuration in ``path``; ``framework`` when the file does not say."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ImportSourceError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    suffix = path.suffix.lower()
    if suffix in (".yaml", ".yml"):
        return _from_yaml(text, str(path), framework)
    if suffix == ".py" or re.search(r"\b\w+\(\s*\w+\s*=", text) and "--" not in text:
        found = _from_python(text, str(path), framework)
        if found is not None:
            return found
    return _from_command_line(text, str(path), framework)


# -- command lines ------------------------------------------------------------------------------------


def _from_command_line(text: str, source: str, framework: Framework | None) -> PeerConfig:
    try:
        words = shlex.split(text.replace("\\\n", " "), comments=True)
    except ValueError as exc:
        raise ImportSourceError(f"{source}: cannot split the command line ({exc})") from None
    start = next((i + 1 for i, w in enumerate(words) if re.search(r"(grpo_fast|grpo|trl)\S*\.py$", w)), None)
    script = words[start - 1] if start else ""
    if start is None:
        start = next((i for i, w in enumerate(words) if w.startswith("--")), None)
        if start is None:
            raise ImportSourceError(f"{source}: no --arguments found (expected an Open Instruct grpo_fast "
                                    "command line, a YAML file or a Python call such as GRPOConfig(...))")
    settings: list[tuple[str, Any]] = []
    name: str | None = None
    values: list[str] = []
    for word in [*words[start:], "--"]:
        if word.startswith("--"):
            if name is not None:
                settings.append((name, _argument(name, values)))
            name, values = None, []
            head, eq, tail = word[2:].partition("=")
            if head:
                name = head.replace("-", "_")
                values = [tail] if eq else []
        elif name is not None and word not in ("&&", "\\&\\&", "\\"):
            values.append(word)
    chosen = framework or ("trl" if "trl" in script and "open_instruct" not in script else "open-instruct")
    return PeerConfig(chosen, tuple(settings), source, "argv")


def _argument(name: str, values: list[str]) -> Any:
    if not values:
        return True  # a flag: --with_tracking
    parsed = [_scalar(v) for v in values]
    if name in _LIST_ARGS:  # names and mixer amounts stay as written ("1.0" is a fraction, "64" a count)
        return parsed if name in ("num_learners_per_node", "reward_weights") else values
    return parsed[0] if len(parsed) == 1 else parsed


def _scalar(word: str) -> Any:
    low = word.lower()
    if low in ("true", "false"):
        return low == "true"
    if low in ("none", "null"):
        return None
    for kind in (int, float):
        try:
            return kind(word)
        except ValueError:
            pass
    return word


# -- Python calls -------------------------------------------------------------------------------------


def _from_python(text: str, source: str, framework: Framework | None) -> PeerConfig | None:
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return None
    settings: list[tuple[str, Any]] = []
    seen: set[str] = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        callee = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        if callee not in _OPEN_INSTRUCT_CALLS | _TRL_CALLS:
            continue
        seen.add(callee)
        for kw in node.keywords:
            if kw.arg is None:
                continue
            try:
                settings.append((kw.arg, ast.literal_eval(kw.value)))
            except ValueError:
                raise ImportSourceError(f"{source}: line {kw.value.lineno}: {kw.arg} = {ast.unparse(kw.value)} "
                                        "is not a literal value; write the value itself") from None
    if not seen:
        return None
    chosen = framework or ("trl" if seen & _TRL_CALLS else "open-instruct")
    return PeerConfig(chosen, tuple(settings), source, "kwargs")


# -- YAML ---------------------------------------------------------------------------------------------


def _from_yaml(text: str, source: str, framework: Framework | None) -> PeerConfig:
    import yaml

    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark is not None else ""
        raise ImportSourceError(f"{source}: {where}not valid YAML ({getattr(exc, 'problem', None) or exc})") from None
    if not isinstance(data, Mapping):
        raise ImportSourceError(f"{source}: expected a mapping of settings at the top of the file")
    chosen = framework or _yaml_framework(data)
    settings = [(path, _interpolate(value, data)) for path, value in _flatten(data, ())]
    return PeerConfig(chosen, tuple(settings), source, "yaml")


def _yaml_framework(data: Mapping[str, Any]) -> Framework:
    roll = {"actor_train", "actor_infer", "rollout_batch_size", "num_return_sequences_in_group", "pretrain", "rewards"}
    return "roll" if roll & set(data) else "trl"


def _flatten(data: Mapping[str, Any], prefix: tuple[str, ...]) -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for name, value in data.items():
        path = (*prefix, str(name))
        entry = lookup(path)
        if isinstance(value, Mapping) and value and (entry is None or entry.table is not None):
            out.extend(_flatten(value, path))
        elif not (isinstance(value, Mapping) and not value):
            out.append((".".join(path), value))
    return out


def _interpolate(value: Any, root: Mapping[str, Any]) -> Any:
    """OmegaConf's whole-value references (``${response_length}``) resolved against the file."""
    if isinstance(value, str) and (m := _INTERPOLATION.match(value.strip())):
        node: Any = root
        for part in m[1].split("."):
            if not isinstance(node, Mapping) or part not in node:
                return value
            node = node[part]
        return _interpolate(node, root)
    return value
