"""Evaluating a saved checkpoint without training (``grpo-run eval CONFIG --checkpoint DIR``):
the run's eval prompts, verifiers, engine and ``[eval]`` settings, the checkpoint's weights (a
LoRA checkpoint's adapter pushed onto the base model when the run syncs adapters, else its merged
model)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import tempfile
from collections.abc import Iterator
from typing import Any
from pathlib import Path

import attrs

from grpo_run.core.config.lora_sync import adapter_slots, choose_lora_sync
from grpo_run.core.config.schema import RunConfig
from grpo_run.core.data.prompts import PromptEncoder
from grpo_run.core.data.sources import load_rows
from grpo_run.core.errors import RunError, UserError
from grpo_run.core.learner.lora import ADAPTER_CONFIG, MERGED_DIR, saved_adapter, write_merged_checkpoint
from grpo_run.core.learner.spec import resolve_device
from grpo_run.core.loop.checkpoint import TRAINER_STATE, find_checkpoint
from grpo_run.core.loop.build import build_episode_runner, build_scorer, load_tokenizer, resolve_model_path
from grpo_run.core.loop.evaluation import Evaluator
from grpo_run.core.loop.traces import TraceWriter
from grpo_run.core.loop.weight_sync import push_snapshot
from grpo_run.core.plugins.families import ENGINE
from grpo_run.core.plugins.adapters import LoraAdapter
from grpo_run.core.plugins.host import PluginHost
from grpo_run.core.plugins.types import EngineContext, SamplingParams
from grpo_run.core.scoring.scorer import RewardScorer

EVAL_METRICS_FILE = "eval_metrics.json"


@attrs.frozen
class CheckpointEval:
    checkpoint: Path
    step: int | None
    """The training step the checkpoint was saved after, when it records one."""
    metrics: dict[str, float]


def model_dir_of(path: str | Path) -> Path:
    """A directory with a Hugging Face model (``config.json``) is used as it is; a run or
    checkpoints directory gives its newest ``step_<n>`` checkpoint; a LoRA checkpoint (its adapter
    only) is used through :func:`full_weights`."""
    path = Path(path)
    if (path / "config.json").is_file() or (path / ADAPTER_CONFIG).is_file():
        return path
    if path.is_dir() and ((path / "checkpoints").is_dir() or any(path.glob(f"step_*/{TRAINER_STATE}"))):
        try:
            return find_checkpoint(path)
        except UserError:
            pass
    raise UserError(f"--checkpoint {path}: not a model directory (no config.json) and no step_<n> checkpoint under it")


@contextlib.contextmanager
def full_weights(model_dir: Path) -> Iterator[Path]:
    """A directory with the full model of ``model_dir``: itself, or for a LoRA checkpoint its
    ``merged/`` model when it was saved, else the base model with the adapter merged in, written
    to a temporary directory for as long as the engine needs it."""
    if (model_dir / "config.json").is_file():
        yield model_dir
    elif (model_dir / MERGED_DIR / "config.json").is_file():
        yield model_dir / MERGED_DIR
    else:
        with tempfile.TemporaryDirectory(prefix="grpo-run-merged-") as tmp:
            write_merged_checkpoint(model_dir, Path(tmp))
            yield Path(tmp)


def checkpoint_dir_of(model_dir: Path) -> Path:
    """The checkpoint directory a model directory belongs to (itself, or the parent of ``merged/``)."""
    return model_dir.parent if model_dir.name == MERGED_DIR else model_dir


def saved_scorer_state(checkpoint: Path) -> dict[str, Any]:
    """The scorer's state a checkpoint holds (rescalers' running statistics); ``{}`` without one.
    The file is memory-mapped: the optimizer state beside it is not read."""
    path = checkpoint / TRAINER_STATE
    if not path.is_file():
        return {}
    import torch

    try:
        return dict(torch.load(path, map_location="cpu", weights_only=True, mmap=True).get("scorer", {}))
    except Exception:  # noqa: BLE001 - written by something else: evaluate with fresh statistics
        return {}


def saved_step(checkpoint: Path) -> int | None:
    info = checkpoint / "grpo_run.json"
    try:
        return int(json.loads(info.read_text(encoding="utf-8"))["step"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def evaluate_checkpoint(
    cfg: RunConfig, host: PluginHost, checkpoint: str | Path, output_dir: Path | None = None
) -> CheckpointEval:
    """Greedy accuracy (and pass@k with ``eval.num_samples``) of ``checkpoint`` on the config's
    eval prompts. With ``output_dir``: writes ``eval_metrics.json`` there, and the completions to
    ``rollouts/eval_<step>.jsonl`` under it."""
    model_dir = model_dir_of(checkpoint)
    step = saved_step(model_dir)
    registry = host.registry
    rows = load_rows(cfg, registry)
    if not rows.eval:
        raise UserError(f"{cfg.run.name}: no eval rows: add [[data.eval]] sources (a [task] has its own)")
    tokenizer = load_tokenizer(cfg, str(model_dir))
    encoder = PromptEncoder(tokenizer, cfg.data.max_prompt_token_length, cfg.data.apply_chat_template)
    prompts, _dropped = encoder.tokenise(rows.eval)
    if not prompts:
        raise UserError(f"every eval prompt is longer than data.max_prompt_token_length={cfg.data.max_prompt_token_length}")
    import torch

    adapter = checkpoint_adapter(cfg, host, model_dir)
    weights_of = contextlib.nullcontext(Path(resolve_model_path(cfg, host))) if adapter else full_weights(model_dir)
    with weights_of as weights:  # kept for the engine's life (an engine may load lazily)
        engine = registry.get(ENGINE, cfg.engine.name)(
            cfg.engine.config,
            EngineContext(model_path=str(weights), tokenizer=tokenizer, dtype=getattr(torch, cfg.model.dtype),
                          device=resolve_device(cfg.model.device), seed=cfg.run.seed,
                          attn_implementation=cfg.model.attn_implementation,
                          adapters=adapter_slots(cfg, registry) if adapter else None),
        )
        if adapter is not None:  # the base model, then the checkpoint's adapter, as in the run
            try:
                asyncio.run(push_snapshot(engine, adapter, step or 0))
            except BaseException:
                engine.close()
                raise
        scorer = build_scorer(cfg, registry)
        scorer.load_state_dict(saved_scorer_state(checkpoint_dir_of(model_dir)))  # e.g. a standardisation's moments
        traces = None
        if output_dir is not None:
            output_dir.mkdir(parents=True, exist_ok=True)
            decode = lambda ids: tokenizer.decode(list(ids), skip_special_tokens=False)  # noqa: E731
            traces = TraceWriter(output_dir, 1, cfg.logging.max_rollout_bytes, decode)
        r = cfg.rollout
        params = SamplingParams(n=1, max_new_tokens=r.response_length, temperature=r.temperature, top_p=r.top_p,
                                stop_strings=tuple(r.stop_strings))
        episodes = build_episode_runner(cfg, registry, tokenizer, engine, params)  # greedy episodes with [environment]
        evaluator = Evaluator(engine, scorer, prompts, r.response_length, r.stop_strings, episodes=episodes,
                              num_samples=cfg.eval.num_samples, temperature=cfg.eval.temperature, traces=traces)
        try:
            metrics = asyncio.run(_evaluate(evaluator, scorer, step or 0))
        finally:
            if episodes is not None:
                episodes.close()
            scorer.close()
            engine.close()
    if evaluator.all_failed is not None:  # no accuracy to report: an error, not a 0
        raise RunError(evaluator.all_failed)
    if output_dir is not None:
        record = {"checkpoint": str(model_dir), "step": step, **metrics}
        (output_dir / EVAL_METRICS_FILE).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    return CheckpointEval(model_dir, step, metrics)


def checkpoint_adapter(cfg: RunConfig, host: PluginHost, model_dir: Path) -> LoraAdapter | None:
    """The adapter of a LoRA checkpoint when the config's run syncs adapters (``model.lora.sync``):
    the engine then loads the base model and takes the adapter, as in training; ``None`` for a full
    model, or when the run syncs merged weights."""
    sync = choose_lora_sync(cfg, host.registry)
    if sync is None or sync.mode != "adapter" or not (model_dir / ADAPTER_CONFIG).is_file():
        return None
    return saved_adapter(model_dir)


async def _evaluate(evaluator: Evaluator, scorer: RewardScorer, step: int) -> dict[str, float]:
    try:
        return await evaluator.evaluate(step)
    finally:
        await scorer.aclose()
