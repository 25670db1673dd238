"""What can be known about a run's model without loading any weights: the device exists in this
torch build, and a model given as a path is a model directory. ``grpo-run check`` reports it,
and training checks it before anything is loaded (otherwise a CPU-only torch fails deep inside
the learner with a 35-line traceback, and a missing directory is taken for a hub repo id:
"Repo id must be in the form ...").

Data files, mixture sources and columns are the data room's to check (:mod:`grpo_run.core.data`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from grpo_run.core.config.schema import ModelSection, RunConfig
from grpo_run.core.errors import ConfigIssue
from grpo_run.core.memory.shapes import shape_problems, text_fields
from grpo_run.core.plugins.families import MODEL
from grpo_run.core.plugins.registry import ComponentRegistry, did_you_mean


def check_model(cfg: RunConfig, registry: ComponentRegistry) -> list[ConfigIssue]:
    """Problems with ``[model]`` that would only show once the model is loaded."""
    issues = device_issues(cfg.model.device) + model_path_issues(cfg.model.name_or_path, registry)
    return issues or model_file_issues(cfg, registry)


def context_issues(cfg: RunConfig, context: int | None) -> list[ConfigIssue]:
    """The longest sequence the config allows must fit the model's context (``max_position_embeddings``)."""
    needed = cfg.data.max_prompt_token_length + cfg.rollout.response_length
    if context is None or needed <= context:
        return []
    return [ConfigIssue("rollout.response_length", (
        f"data.max_prompt_token_length + rollout.response_length = {cfg.data.max_prompt_token_length} + "
        f"{cfg.rollout.response_length} = {needed} tokens, more than the model's context ({context:,} positions, "
        f"max_position_embeddings in its config.json)"))]


def model_file_issues(cfg: RunConfig, registry: ComponentRegistry) -> list[ConfigIssue]:
    """What a local model directory's ``config.json`` says against the config, read as JSON (no
    torch): a shape no model has, a context shorter than the longest sequence."""
    path = Path(cfg.model.name_or_path).expanduser() / "config.json"
    if registry.has(MODEL, cfg.model.name_or_path) or not path.is_file():
        return []
    try:
        raw = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        return [ConfigIssue("model.name_or_path", f"{path}: cannot read it: {exc}")]
    if not isinstance(raw, dict):
        return [ConfigIssue("model.name_or_path", f"{path}: not a JSON object")]
    problems = shape_problems(raw)
    if problems:
        return [ConfigIssue("model.name_or_path", f"{path}: {problems[0]}")]
    context = text_fields(raw).get("max_position_embeddings")
    return context_issues(cfg, context if isinstance(context, int) else None)


def device_issues(device: str) -> list[ConfigIssue]:
    """``model.device`` must name a device this torch build has (``"auto"`` always does: CUDA when
    one is visible, else the CPU). Those two need no torch (``grpo-run check`` imports none)."""
    if device in ("auto", "cpu"):
        return []
    import torch

    try:
        parsed = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        return [ConfigIssue("model.device", f"{device!r} is not a torch device: {exc}")]
    problem = None
    if parsed.type == "cuda":
        if torch.version.cuda is None and torch.version.hip is None:
            problem = (f"{device!r}, but this torch ({torch.__version__}) is built without CUDA; use "
                       f'model.device = "cpu", or install a CUDA build of torch')
        elif not torch.cuda.is_available():
            problem = f"{device!r}, but no CUDA device is visible to this process (check CUDA_VISIBLE_DEVICES)"
        elif parsed.index is not None and parsed.index >= torch.cuda.device_count():
            problem = f"{device!r}, but only {torch.cuda.device_count()} CUDA device(s) are visible"
    elif parsed.type != "cpu":
        backend = getattr(torch, parsed.type, None) or getattr(torch.backends, parsed.type, None)
        is_available = getattr(backend, "is_available", None)
        if is_available is None or not is_available():
            problem = f"{device!r}, but this torch ({torch.__version__}) has no usable {parsed.type} device"
    return [ConfigIssue("model.device", problem)] if problem else []


def model_path_issues(name: str, registry: ComponentRegistry) -> list[ConfigIssue]:
    """A registered model name is fine; a path must be a model directory; a hub id (``owner/name``)
    cannot be checked without the network and is left to loading, unless a name without an owner
    is a near miss of a registered model."""
    if registry.has(MODEL, name):
        return []
    path = Path(name).expanduser()
    if path.exists():
        if not path.is_dir():
            return [ConfigIssue("model.name_or_path", f"{name!r} is a file; expected a model directory "
                                                      f"(Hugging Face format, as written by save_pretrained)")]
        if not (path / "config.json").is_file():
            return [ConfigIssue("model.name_or_path", f"{name!r} has no config.json; expected a model "
                                                      f"directory (Hugging Face format, as written by save_pretrained)")]
        return []
    registered = registry.names(MODEL)
    if looks_like_path(name):
        return [ConfigIssue(
            "model.name_or_path",
            f"{name!r}: no such directory (registered models: {', '.join(registered) or 'none'})"
            f"{did_you_mean(Path(name).name, registered)}",
        )]
    suggestion = did_you_mean(name, registered)
    if "/" not in name and suggestion:  # most likely a misspelt registered model, not a hub id
        return [ConfigIssue("model.name_or_path", f"{name!r} is not a registered model, nor a directory{suggestion}")]
    return []


def looks_like_path(name: str) -> bool:
    """A hub repo id is ``name`` or ``owner/name``; anything else with a slash, or starting with
    ``/``, ``.`` or ``~``, is a path."""
    return name.startswith(("/", ".", "~")) or "\\" in name or name.count("/") > 1


def raw_model_issues(data: Mapping[str, Any], registry: ComponentRegistry,
                     found: Sequence[ConfigIssue]) -> list[ConfigIssue]:
    """:func:`check_model`'s issues read from a config's tables, for a config that failed
    validation, so that a misspelt model name comes with the other errors, not a run later.
    A key that already has an issue in ``found`` (a wrong type, say) is not checked again."""
    model = data.get("model", {})
    if not isinstance(model, Mapping):
        return []
    known = {issue.path for issue in found}
    defaults = ModelSection()
    out = []
    device = model.get("device", defaults.device)
    if "model.device" not in known and isinstance(device, str):
        out += device_issues(device)
    name = model.get("name_or_path", defaults.name_or_path)
    if "model.name_or_path" not in known and isinstance(name, str):
        out += model_path_issues(name, registry)
    return out
