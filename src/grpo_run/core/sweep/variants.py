"""What a sweep varies: ``--vary KEY=V1,V2[,...]`` read into values, the product of the variations
as named variants, and the keys that may not vary.

Everything a variant's adapter owns may vary: the optimizer, the loss, the KL, advantages,
sampling, seeds, verifiers and their weights, data sources and mixing, LoRA rank, alpha and
targets. What the variants share may not: the base model and how it is held (``model.*`` but
``model.lora``), the engine, the learner's placement, and what one process has once (its thread
count, its log level). Such a key is refused before anything loads, in one line naming it and why.
"""

from __future__ import annotations

import itertools
import re
import tomllib
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from grpo_run.core.config.loading import parse_override_value
from grpo_run.core.config.toml_writer import toml_value
from grpo_run.core.errors import ConfigError, ConfigIssue

VARY_SOURCE = "--vary"

SHARED = "the variants share"
FIXED: tuple[tuple[str, str], ...] = (
    ("model.lora.sync", "a sweep hands each variant's adapter to the shared engine (sync = \"adapter\")"),
    ("model.lora", ""),  # what the adapter owns: may vary (the entries above and below are more specific)
    ("model", f"{SHARED} one base model, held once"),
    ("engine", f"{SHARED} one engine, which serves every variant's adapter"),
    ("distributed", f"{SHARED} one placement"),
    ("learner.max_tokens_per_forward", ""),
    ("learner.max_tokens_per_logprob_forward", ""),
    ("learner.max_memory_gib", ""),
    ("learner", f"{SHARED} one learner process holding the base model"),
    ("train.num_threads", "torch's thread count belongs to the process the variants share"),
    ("rollout.async_steps", f"{SHARED} one event loop, whose compute threads it decides"),
    ("logging.level", f"{SHARED} one process, whose log level it is"),
    ("logging.dashboard_port", f"{SHARED} one process"),
    ("run.output_dir", "the sweep names the variants' run directories (--output-dir)"),
    ("run.name", "the sweep names the variants' run directories (--output-dir)"),
    ("checkpoint.dir", "each variant keeps its checkpoints in its own run directory"),
    ("checkpoint.push_to_hub", "the variants would push to one repository"),
)
"""Key prefixes, most specific first, and why such a key may not vary (``""``: it may)."""

_NAME_CHARS = re.compile(r"[^A-Za-z0-9.+-]+")
MAX_NAME = 64
"""Variant names are adapter names in the engine (:class:`~grpo_run.LoraAdapter`) and directory names."""


@attrs.frozen
class Variant:
    """One point of the sweep: its name (its run directory's and its adapter's) and its values."""

    name: str
    overrides: tuple[tuple[str, Any], ...]
    """``(key, value)`` for each varied key, in ``--vary`` order."""
    adapter: str = ""
    """Its adapter's name on the shared base model and in the engine: the name, ``.`` replaced
    (peft names modules with it)."""

    def override_texts(self) -> list[str]:
        """The variant's values as ``--set`` overrides."""
        return [f"{key}={toml_value(value)}" for key, value in self.overrides]


def refusal(key: str) -> str | None:
    """Why ``key`` may not vary (``None``: it may)."""
    for prefix, why in FIXED:
        if key == prefix or key.startswith(prefix + "."):
            return why or None
    return None


def parse_vary(texts: Sequence[str]) -> dict[str, list[Any]]:
    """``["optim.lr=1e-3,3e-3", "run.seed=1,2"]`` -> ``{"optim.lr": [0.001, 0.003], "run.seed": [1, 2]}``.

    The values are read as one TOML array when they are one (``loss.name=dapo,grpo`` is not, so
    its parts are each read as a ``--set`` value would be); every problem is one
    :class:`ConfigError` from ``--vary``, each naming its key."""
    out: dict[str, list[Any]] = {}
    issues: list[ConfigIssue] = []
    for text in texts:
        key, sep, raw = text.partition("=")
        key = ".".join(part.strip() for part in key.split("."))
        if not sep or not all(key.split(".")) or not raw.strip():
            issues.append(ConfigIssue("", f"malformed {text!r}: expected KEY=V1,V2[,...], e.g. optim.lr=1e-3,3e-3"))
            continue
        if key in out:
            issues.append(ConfigIssue(key, "is varied twice: give all its values in one --vary"))
            continue
        values = _values(raw)
        if len(set(map(repr, values))) < len(values):
            issues.append(ConfigIssue(key, f"has a value twice ({raw.strip()}): each variant must differ"))
            continue
        out[key] = values
    issues += key_issues(out)
    if issues:
        raise ConfigError(VARY_SOURCE, issues)
    return out


def key_issues(vary: Mapping[str, Sequence[Any]]) -> list[ConfigIssue]:
    """The varied keys that may not vary, each with the reason."""
    issues = []
    for key, values in vary.items():
        why = refusal(key)
        if why is not None:
            issues.append(ConfigIssue(key, f"cannot vary in a sweep: {why}"))
        elif not values:
            issues.append(ConfigIssue(key, "has no values"))
    return issues


def _values(raw: str) -> list[Any]:
    try:
        parsed = tomllib.loads(f"values = [{raw}]")["values"]
    except tomllib.TOMLDecodeError:
        return [parse_override_value(part) for part in raw.split(",")]
    return list(parsed)


def variants_of(vary: Mapping[str, Sequence[Any]]) -> list[Variant]:
    """The product of the variations, the first key varying slowest, each named after its values
    (``lr-0.001_seed-2``)."""
    keys = list(vary)
    shorts = _short_names(keys)
    out, taken, adapters = [], set(), set()
    for values in itertools.product(*(vary[k] for k in keys)):
        name = "_".join(f"{shorts[k]}-{_text(v)}" for k, v in zip(keys, values)) or "base"
        name = _unique(name, taken)
        adapter = _unique(name.replace(".", "_"), adapters)
        taken.add(name)
        adapters.add(adapter)
        out.append(Variant(name, tuple(zip(keys, values)), adapter))
    return out


def _short_names(keys: Sequence[str]) -> dict[str, str]:
    """Each key's last part, or the whole key where two share it."""
    last = [k.rsplit(".", 1)[-1] for k in keys]
    return {k: (short if last.count(short) == 1 else k) for k, short in zip(keys, last)}


def _text(value: Any) -> str:
    text = value if isinstance(value, str) else toml_value(value)
    return _NAME_CHARS.sub("-", text).strip("-.") or "x"


def _unique(name: str, taken: set[str]) -> str:
    name = re.sub(r"^[^A-Za-z0-9]+", "", name)[:MAX_NAME] or "variant"
    candidate, i = name, 1
    while candidate in taken:
        i += 1
        suffix = f"-{i}"
        candidate = name[: MAX_NAME - len(suffix)] + suffix
    return candidate
