"""Cross-section rules of ``[learner]``, ``[distributed]`` and ``engine.num_engines``: where the
learner, the engines and the scoring can run.

Each is a ``(cfg) -> list[ConfigIssue]`` rule, listed in :data:`PLACEMENT_RULES` and checked with
the core's other invariants before any model is loaded.
"""

from __future__ import annotations

import importlib.util

from grpo_run.core.config.schema import RunConfig
from grpo_run.core.errors import ConfigIssue


def _device(cfg: RunConfig) -> str:
    """``model.device`` with ``"auto"`` resolved as this machine would (CUDA when visible)."""
    if cfg.model.device != "auto":
        return cfg.model.device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def ray_options_need_ray(cfg: RunConfig) -> list[ConfigIssue]:
    """Resource specs and placement groups mean something only to Ray."""
    d = cfg.distributed
    if d.backend == "ray":
        return []
    given = {
        "engine_resources": d.engine_resources,
        "learner_resources": d.learner_resources,
        "scoring_resources": d.scoring_resources,
        "placement_strategy": d.placement_strategy,
    }
    issues = [
        ConfigIssue(f"distributed.{key}", 'only applies with distributed.backend = "ray"')
        for key, value in given.items()
        if value is not None
    ]
    if d.scoring_actors:
        issues.append(ConfigIssue("distributed.scoring_actors", 'only applies with distributed.backend = "ray"'))
    return issues


def scoring_actors_run_worker_processes(cfg: RunConfig) -> list[ConfigIssue]:
    """A scoring actor is a pool of worker processes: it needs at least one."""
    if cfg.distributed.scoring_actors and cfg.scoring.num_workers == 0:
        return [ConfigIssue("scoring.num_workers", "is 0; distributed.scoring_actors runs scoring.num_workers "
                            "worker processes in each actor: set it to 1 or more")]
    return []


def ranks_pick_their_own_device(cfg: RunConfig) -> list[ConfigIssue]:
    """With several ranks each takes its own GPU (its local rank, or the one Ray gives it)."""
    device = cfg.model.device
    if cfg.learner.num_learners == 1 and cfg.distributed.backend == "local":
        return []
    if device in ("cpu", "cuda", "auto"):
        return []
    return [
        ConfigIssue(
            "model.device",
            f'is "{device}"; with several learners or Ray actors each process uses its own GPU: '
            'set model.device = "cuda" (or "cpu")',
        )
    ]


def gpu_only_options(cfg: RunConfig) -> list[ConfigIssue]:
    """Offloading moves state from the GPU to the CPU; NCCL talks between GPUs."""
    learner = cfg.learner
    if not (learner.offload_optimizer or learner.offload_params or learner.dist_backend == "nccl"):
        return []  # nothing to check: no need to ask torch about the device
    if _device(cfg) != "cpu":
        return []
    issues = [
        ConfigIssue(f"learner.{key}", "moves state from the GPU to the CPU, but model.device is \"cpu\"")
        for key, on in (("offload_optimizer", learner.offload_optimizer), ("offload_params", learner.offload_params))
        if on
    ]
    if learner.dist_backend == "nccl":
        issues.append(ConfigIssue("learner.dist_backend", 'NCCL needs GPUs, but model.device is "cpu"; use "gloo"'))
    return issues


def ray_actors_get_gpus(cfg: RunConfig) -> list[ConfigIssue]:
    """A Ray actor sees only the GPUs it asked for: a CUDA model needs ``num_gpus > 0``."""
    d = cfg.distributed
    if d.backend != "ray" or not _device(cfg).startswith("cuda"):
        return []
    return [
        ConfigIssue(
            f"distributed.{kind}_resources.num_gpus",
            f'is 0 but model.device is "{cfg.model.device}" (a GPU here): a Ray actor sees only the GPUs it asks for',
        )
        for kind in ("engine", "learner")
        if d.resources_of(kind).num_gpus == 0  # type: ignore[arg-type]
    ]


def extras_installed(cfg: RunConfig) -> list[ConfigIssue]:
    """DeepSpeed and Ray are optional dependencies: say which extra to install before loading anything."""
    needed = []
    if cfg.learner.strategy == "deepspeed":
        needed.append(("learner.strategy", "deepspeed", "deepspeed"))
    if cfg.distributed.backend == "ray":
        needed.append(("distributed.backend", "ray", "ray"))
    return [
        ConfigIssue(key, f'"{module}" needs the {module} package: pip install "grpo-run[{extra}]"', about_machine=True)
        for key, module, extra in needed
        if importlib.util.find_spec(module) is None
    ]


PLACEMENT_RULES = (
    ray_options_need_ray,
    scoring_actors_run_worker_processes,
    ranks_pick_their_own_device,
    gpu_only_options,
    ray_actors_get_gpus,
    extras_installed,
)
