"""The ``verifiers`` task: a ``verifiers`` environment's taskset as grpo-run's prompt source.

``[task] name = "verifiers"`` with the same ``env_id`` / ``env_args`` as the ``verifiers``
environment. The taskset is loaded with the package's own loader and read once; each task becomes
a standard row (its prompt as chat messages, its durable id or ``vf-<index>`` as the row id) that
carries the task's index as ``verifiers_task``, which the ``verifiers`` environment runs. So the
samplers, data checks, eval splits and the row-level reports apply to a package's taskset as to
any other source. The last ``num_eval`` tasks are the held-out eval rows. A taskset must be finite.
The rows have no ground truth: the environment's rubric scores the episode (set
``scoring.row_verifiers = false``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from grpo_run.plugins.environments.verifiers_env import check_env_args, check_env_id


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(getattr(part, "text", "") or "" for part in content or ())


@attrs.frozen
class VerifiersTaskConfig:
    """Options of the ``verifiers`` task."""

    env_id: str = attrs.field(validator=check_env_id)
    """The taskset id the ``verifiers`` package loads (as the environment's ``env_id``)."""
    env_args: Mapping[str, Any] = attrs.field(factory=dict, validator=check_env_args)
    """More fields of the package's ``EnvConfig`` (as the environment's ``env_args``)."""
    num_eval: int = attrs.field(default=0, validator=[attrs.validators.instance_of(int), attrs.validators.ge(0)])
    """How many of the taskset's last tasks are held out as eval rows."""


class VerifiersTask:
    """The tasks of a ``verifiers`` environment's taskset, as rows naming their task index."""

    name = "verifiers"
    Config = VerifiersTaskConfig

    def __init__(self, config: VerifiersTaskConfig) -> None:
        from verifiers.v1.utils.loaders import load_taskset

        from grpo_run.plugins.environments.verifiers_env import env_config

        taskset = load_taskset(env_config(config.env_id, config.env_args).taskset)
        if not taskset.bounded:
            raise ValueError(f"the taskset of {config.env_id!r} is infinite; bound it in env_args")
        rows = [self.row(task) for task in taskset]
        if config.num_eval >= len(rows):
            raise ValueError(f"num_eval ({config.num_eval}) must be below the taskset's {len(rows)} tasks")
        cut = len(rows) - config.num_eval
        self._train, self._eval = rows[:cut], rows[cut:]

    @staticmethod
    def row(task: Any) -> dict[str, Any]:
        data = task.data
        prompt = data.prompt
        if isinstance(prompt, str):
            messages = [{"role": "user", "content": prompt}]
        else:
            messages = [{"role": m.role, "content": _text(m.content)} for m in prompt or ()]
        if data.system_prompt:
            messages.insert(0, {"role": "system", "content": data.system_prompt})
        return {"id": data.id or f"vf-{data.idx}", "messages": messages, "ground_truth": "",
                "verifiers_task": data.idx}

    def train_rows(self) -> list[dict[str, Any]]:
        return list(self._train)

    def eval_rows(self) -> list[dict[str, Any]]:
        return list(self._eval)
