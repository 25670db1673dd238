"""What a reward model's files say before any weight is loaded: where it is, whether it is a
one-label sequence classifier, how many parameters it holds.

``grpo-run check`` calls :func:`local_problem` (JSON only, no torch), so a missing directory or a
checkpoint that is not a reward model is a config error naming the key before anything loads.
A hub id cannot be checked without the hub; the verifier checks the loaded config when it starts.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

KEY = "verifiers.reward_model"
"""The table of the verifier, as error messages name its keys."""

_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")


def local_path(model: str) -> Path | None:
    """The directory ``model`` names, or ``None`` when it is a hub id (``org/name``). A string that
    can only be a path (absolute, ``./``, ``~``, two slashes) is a path even when it is missing."""
    path = Path(os.path.expanduser(model))
    if path.is_dir() or not _HUB_ID.match(model):
        return path
    return None


def labels_of(config: Mapping[str, Any]) -> int:
    """The number of labels a transformers ``config.json`` gives its head (transformers' default: 2)."""
    id2label = config.get("id2label")
    if isinstance(id2label, Mapping) and id2label:
        return len(id2label)
    num = config.get("num_labels")
    return int(num) if isinstance(num, int) else 2


def classifier_problem(architectures: Any, num_labels: int) -> str | None:
    """Why a model with these ``architectures`` and labels is no reward model, or ``None``."""
    names = [a for a in architectures or [] if isinstance(a, str)]
    if not any(a.endswith("ForSequenceClassification") for a in names):
        shown = ", ".join(names) if names else "none given"
        return (f"not a sequence classifier (architectures: {shown}); a reward model is an "
                f"AutoModelForSequenceClassification checkpoint with one label")
    if num_labels != 1:
        return f"a classifier with {num_labels} labels; a reward model has exactly one (num_labels = 1)"
    return None


def local_problem(model: str) -> str | None:
    """What is wrong with a local reward model directory (``None`` for a hub id or a good one)."""
    path = local_path(model)
    if path is None:
        return None
    if not path.is_dir():
        return "no such directory" if not path.exists() else "not a directory"
    config_file = path / "config.json"
    try:
        config = json.loads(config_file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return "no config.json in it (not a Hugging Face model directory)"
    except (OSError, ValueError) as exc:
        return f"config.json cannot be read: {exc}"
    if not isinstance(config, Mapping):
        return "config.json is not a JSON object"
    return classifier_problem(config.get("architectures"), labels_of(config))


def model_size(model: str, *, revision: str | None = None, trust_remote_code: bool = False) -> tuple[int, int]:
    """``(parameters, hidden size)`` of the reward model's class built from its ``config.json`` on
    the meta device: exact (head included), no weight read or allocated. A hub id needs the hub
    or its cache."""
    import torch
    from transformers import AutoConfig, AutoModelForSequenceClassification

    path = local_path(model)
    source = str(path) if path is not None else model
    config = AutoConfig.from_pretrained(source, revision=revision, trust_remote_code=trust_remote_code)
    with torch.device("meta"):
        skeleton = AutoModelForSequenceClassification.from_config(config, trust_remote_code=trust_remote_code)
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    return sum(p.numel() for p in skeleton.parameters()), int(getattr(text, "hidden_size", 0) or 0)
