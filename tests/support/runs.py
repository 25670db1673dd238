"""The one writer of small end-to-end run configs for tests: rows files plus a TOML config.

``write_run(tmp_path, verifier=..., **sections)`` writes ``train.jsonl`` (and ``eval.jsonl``),
then a config whose sections are the small defaults below deep-merged with ``sections``
(``rollout={"response_length": 5}``); a value of ``None`` removes a key. ``agent_run`` writes
the agent example with another agent function.
"""

from __future__ import annotations

import copy
import json
import tomllib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from grpo_run.core.config.toml_writer import dumps_toml
from support.paths import EXAMPLES

DEFAULTS: dict[str, Any] = {
    "model": {"name_or_path": "tiny-random"},
    "data": {"max_prompt_token_length": 16},
    "rollout": {"num_unique_prompts_rollout": 3, "num_samples_per_prompt_rollout": 4, "response_length": 6},
    "algorithm": {"pack_length": 32, "filter_zero_std_samples": False},
    "train": {"total_steps": 2, "local_eval_every": 0},
    "scoring": {"num_workers": 0},
    "logging": {"progress": False, "report_waits_s": 0},  # tests that read the output exactly stay exact on a loaded machine
}


def write_rows(path: Path, n: int, verifier: str, prompt: Callable[[int], str], gold: Callable[[int], str]) -> Path:
    rows = [{"messages": [{"role": "user", "content": prompt(i)}], "ground_truth": gold(i), "verifier": verifier}
            for i in range(n)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` with ``over`` merged in, table by table; ``None`` in ``over`` deletes the key."""
    out = copy.deepcopy(dict(base))
    for key, value in over.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def write_run(
    tmp_path: Path,
    *,
    verifier: str,
    verifier_config: Mapping[str, Any] | None = None,
    train_rows: int = 12,
    eval_rows: int = 0,
    prompt: Callable[[int], str] = lambda i: f"{i}+1",
    gold: Callable[[int], str] = lambda i: str(i + 1),
    name: str = "run.toml",
    **sections: Any,
) -> Path:
    """Write the rows and the config; returns the config's path."""
    data: dict[str, Any] = {"train": [{"path": str(write_rows(tmp_path / "train.jsonl", train_rows, verifier, prompt, gold))}]}
    if eval_rows:
        data["eval"] = [{"path": str(write_rows(tmp_path / "eval.jsonl", eval_rows, verifier, prompt, gold))}]
    config = merge(DEFAULTS, {"data": data, "verifiers": {verifier: dict(verifier_config or {})}})
    config = merge(config, sections)
    path = tmp_path / name
    path.write_text(dumps_toml(config), encoding="utf-8")
    return path


def agent_run(tmp_path: Path, function: str, **sections: Any) -> tuple[Path, Path]:
    """``examples/agent-calculator.toml`` with ``environment.function = function``, 2 x 4
    episodes, 2 steps, no evaluation, merged with ``sections``: (config, run directory)."""
    cfg = tomllib.loads((EXAMPLES / "agent-calculator.toml").read_text())
    cfg["train"].pop("stop_at_eval_accuracy")
    cfg = merge(cfg, {"environment": {"function": function},
                      "rollout": {"num_unique_prompts_rollout": 2, "num_samples_per_prompt_rollout": 4},
                      "train": {"total_steps": 2, "local_eval_every": 0}, "logging": {"progress": False}})
    cfg = merge(cfg, sections)
    path = tmp_path / "agent.toml"
    path.write_text(dumps_toml(cfg), encoding="utf-8")
    return path, tmp_path / "run"
