"""Builds every object of a run from a validated config: the one place that wires plugins."""

from __future__ import annotations

import copy
import random
from pathlib import Path
from typing import Any

import attrs
import torch

from grpo_run.core.plugins.contracts import EngineContext
from grpo_run.core.config.schema import RunConfig
from grpo_run.core.data.rows import PromptEncoder, PromptSet, check_row_verifiers, load_prompt_set
from grpo_run.core.errors import UserError
from grpo_run.core.learner.learner import Learner
from grpo_run.core.plugins.host import PluginHost
from grpo_run.core.runlog import get_logger
from grpo_run.core.scoring.scorer import RewardScorer

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@attrs.define
class RunParts:
    """Everything a run needs, constructed and ready."""

    cfg: RunConfig
    host: PluginHost
    run_dir: Path
    prompts: PromptSet
    encoder: PromptEncoder
    tokenizer: Any
    engine: Any
    scorer: RewardScorer
    sampler: Any
    learner: Learner
    trackers: list[Any]

    def rollout_state(self) -> dict[str, Any]:
        """What decides the next rollout batches: the sampler's state and, if it keeps one, the engine's."""
        state: dict[str, Any] = {"sampler": self.sampler.state_dict()}
        engine_state = getattr(self.engine, "state_dict", None)
        if engine_state is not None:
            state["engine"] = engine_state()
        return copy.deepcopy(state)  # a snapshot: the live objects keep moving

    def close(self) -> None:
        for closer in (self.scorer.close, self.engine.close, *(t.close for t in self.trackers)):
            try:
                closer()
            except Exception as exc:  # shutting down: report, keep closing the rest
                get_logger().warning("close_failed", error=f"{type(exc).__name__}: {exc}")


def resolve_model_path(cfg: RunConfig, host: PluginHost) -> str:
    """A registered model name resolves through its plugin; anything else is a path or hub id."""
    name = cfg.model.name_or_path
    if host.registry.has("model", name):
        source_cls = host.registry.get("model", name)
        return source_cls(source_cls.Config()).resolve()
    return name


def build_run(cfg: RunConfig, host: PluginHost, run_dir: Path, *, policy_from: str | Path | None = None) -> RunParts:
    """Load data, model, tokenizer and every plugin component for ``cfg``.

    ``policy_from``: a checkpoint directory (Hugging Face format) whose weights the policy starts
    from instead of ``model.name_or_path`` (resuming). The tokenizer, the engine's initial
    weights and the reference policy still come from ``model.name_or_path``.
    """
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    transformers.utils.logging.disable_progress_bar()  # our own progress display owns the console
    log = get_logger()
    seed_everything(cfg.run.seed)
    if cfg.train.num_threads:
        torch.set_num_threads(cfg.train.num_threads)
    registry = host.registry
    prompts = load_prompt_set(cfg, registry)
    check_row_verifiers(prompts.train + prompts.eval, list(cfg.verifiers))

    model_path = resolve_model_path(cfg, host)
    dtype = _DTYPES[cfg.model.dtype]
    try:
        tokenizer = AutoTokenizer.from_pretrained(
            model_path, revision=cfg.model.revision, trust_remote_code=cfg.model.trust_remote_code
        )
        policy = AutoModelForCausalLM.from_pretrained(
            str(policy_from) if policy_from is not None else model_path,
            dtype=dtype,
            revision=cfg.model.revision,
            attn_implementation=cfg.model.attn_implementation,
            trust_remote_code=cfg.model.trust_remote_code,
        ).to(cfg.model.device)
    except OSError as exc:  # missing directory, no hub access, missing files
        raise UserError(f"model.name_or_path={cfg.model.name_or_path!r}: cannot load the model: {exc}") from None
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    if cfg.model.gradient_checkpointing:
        policy.gradient_checkpointing_enable()
    reference = None
    if cfg.kl.beta > 0 and cfg.kl.reference != "none":  # frozen or Polyak: starts as the initial policy
        reference = AutoModelForCausalLM.from_pretrained(
            model_path, dtype=dtype, attn_implementation=cfg.model.attn_implementation
        ).to(cfg.model.device)
        reference.eval().requires_grad_(False)

    encoder = PromptEncoder(tokenizer, cfg.data.max_prompt_token_length)
    prompts = _drop_long_prompts(prompts, encoder, log)

    engine_cls = registry.get("engine", cfg.engine.name)
    engine = engine_cls(
        cfg.engine.config,
        EngineContext(model_path=model_path, tokenizer=tokenizer, dtype=dtype, device=cfg.model.device, seed=cfg.run.seed,
                      attn_implementation=cfg.model.attn_implementation),
    )
    scorer = RewardScorer.from_config(
        cfg.scoring,
        verifiers={name: (registry.get("verifier", name), conf) for name, conf in cfg.verifiers.items()},
        default_verifier=cfg.data.default_verifier,
    )
    sampler = registry.get("sampler", cfg.sampler.name)(cfg.sampler.config, prompts.train, cfg.run.seed)
    loss = registry.get("loss", cfg.loss.name)(cfg.loss.config)
    kl = registry.get("kl", cfg.kl.name)(cfg.kl.config) if cfg.kl.beta > 0 else None
    learner = Learner(cfg, policy, reference, loss, kl, pad_token_id=tokenizer.pad_token_id)
    trackers_cfg = dict(cfg.trackers)
    if "jsonl" not in trackers_cfg:
        jsonl_cls = registry.get("tracker", "jsonl")
        trackers_cfg = {"jsonl": jsonl_cls.Config(), **trackers_cfg}
    trackers = [registry.get("tracker", name)(conf, str(run_dir)) for name, conf in trackers_cfg.items()]
    log.info("run_built", model=model_path, train_rows=len(prompts.train), eval_rows=len(prompts.eval),
             parameters=sum(p.numel() for p in policy.parameters()))
    return RunParts(cfg, host, run_dir, prompts, encoder, tokenizer, engine, scorer, sampler, learner, trackers)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    torch.manual_seed(seed)


def _drop_long_prompts(prompts: PromptSet, encoder: PromptEncoder, log: Any) -> PromptSet:
    train = [r for r in prompts.train if encoder.fits(r)]
    evals = [r for r in prompts.eval if encoder.fits(r)]
    dropped = len(prompts.train) - len(train) + len(prompts.eval) - len(evals)
    if dropped:
        log.warning("prompts_too_long_dropped", count=dropped, max_prompt_token_length=encoder.max_prompt_tokens)
    if not train:
        raise UserError(
            f"every training prompt is longer than data.max_prompt_token_length={encoder.max_prompt_tokens} tokens"
        )
    return PromptSet(train=train, eval=evals)
