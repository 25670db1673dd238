"""Builds every object of a run from a validated config: the one place that wires plugins."""

from __future__ import annotations

import concurrent.futures
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import torch

from grpo_run.core.config.lora_sync import adapter_slots, choose_lora_sync, resolved_lora
from grpo_run.core.config.schema import RunConfig
from grpo_run.core.data.prompts import PromptEncoder, PromptSet, tokenise_prompt_set
from grpo_run.core.data.sources import load_rows
from grpo_run.core.errors import UserError
from grpo_run.core.learner.spec import ComponentSpec, LearnerSpec, ModelSpec, resolve_device
from grpo_run.core.loop.episode_setup import chosen_renderer, row_verifier_note
from grpo_run.core.loop.evaluation import Evaluator
from grpo_run.core.loop.memory_setup import with_budget_plan
from grpo_run.core.loop.scheduler import LoopParts, LoopSettings
from grpo_run.core.loop.solvability import unsolvable_warnings
from grpo_run.core.loop.traces import TraceWriter
from grpo_run.core.placement.learner_group import LearnerGroup
from grpo_run.core.placement.select import Placement, build_placement
from grpo_run.core.plugins.abilities import LogsCompletions
from grpo_run.core.plugins.contracts import GenerationEngine, Sampler, Tracker
from grpo_run.core.plugins.families import (
    ENGINE, ENVIRONMENT, KL, LOSS, MODEL, RENDERER, SAMPLER, TOOL, TRACKER, VERIFIER,
)
from grpo_run.core.plugins.host import PluginHost
from grpo_run.core.plugins.registry import ComponentRegistry
from grpo_run.core.plugins.types import EngineContext, SamplingParams
from grpo_run.core.rollout.producer import RolloutProducer
from grpo_run.core.runlog import get_logger
from grpo_run.core.scoring.scorer import RewardScorer


@attrs.define
class RunParts:
    """Everything a run needs, constructed and ready."""

    cfg: RunConfig
    host: PluginHost
    run_dir: Path
    prompts: PromptSet
    tokenizer: Any
    engine: GenerationEngine
    scorer: RewardScorer
    sampler: Sampler
    learner: LearnerGroup
    trackers: list[Tracker]
    producer: RolloutProducer
    evaluator: Evaluator | None
    traces: TraceWriter | None = None
    """Writes ``rollouts/`` (train traces through the run's observer, eval traces by the evaluator)."""
    placement: Placement | None = None
    notes: list[str] = attrs.Factory(list)
    """Console lines about choices the config left open (an environment's default renderer)."""
    episodes: Any = None
    """The ``[environment]``'s :class:`~grpo_run.core.rollout.episode_runner.EpisodeRunner`, if any."""

    def loop_parts(self) -> LoopParts:
        return LoopParts(self.producer, self.learner, self.engine, self.evaluator)

    def close(self) -> None:
        closers = [self.scorer.close, self.engine.close, self.learner.close]
        closers += [self.producer.close] if hasattr(self.producer, "close") else []
        for closer in closers + ([self.placement.close] if self.placement is not None else []):
            try:
                closer()
            except Exception as exc:  # shutting down: report, keep closing the rest
                get_logger().warning("close_failed", error=f"{type(exc).__name__}: {exc}")


def loop_settings(cfg: RunConfig) -> LoopSettings:
    return LoopSettings(
        total_steps=cfg.train.total_steps,
        async_steps=cfg.rollout.async_steps,
        local_eval_every=cfg.train.local_eval_every,
        stop_at_eval_accuracy=cfg.train.stop_at_eval_accuracy,
        max_runtime_s=cfg.train.max_runtime_s,
        save_freq=cfg.checkpoint.save_freq,
        algorithm=cfg.algorithm,
    )


def resolve_model_path(cfg: RunConfig, host: PluginHost) -> str:
    """A registered model name resolves through its plugin; anything else is a path or hub id."""
    name = cfg.model.name_or_path
    if host.registry.has(MODEL, name):
        source_cls = host.registry.get(MODEL, name)
        return source_cls(source_cls.Config()).resolve()
    return name


def learner_spec(cfg: RunConfig, host: PluginHost, model_path: str, pad_token_id: int,
                 policy_from: str | Path | None = None, *, device: str | None = None) -> LearnerSpec:
    """The learner's part of ``cfg``, as a picklable spec (``device``: plan for that device
    instead of ``model.device`` resolved here)."""
    registry = host.registry
    m = cfg.model
    device = device or resolve_device(m.device)
    checkpointing = device.startswith("cuda") if m.gradient_checkpointing == "auto" else m.gradient_checkpointing
    return LearnerSpec(
        model=ModelSpec(
            path=model_path, dtype=m.dtype, device=device, attn_implementation=m.attn_implementation,
            revision=m.revision, trust_remote_code=m.trust_remote_code,
            gradient_checkpointing=checkpointing,
            policy_from=str(policy_from) if policy_from is not None else None,
            autocast=m.autocast, lora=resolved_lora(cfg, registry), seed=cfg.run.seed,
        ),
        algorithm=cfg.algorithm,
        optim=cfg.optim,
        kl=cfg.kl,
        loss=ComponentSpec(registry.get(LOSS, cfg.loss.name), cfg.loss.config),
        kl_estimator=ComponentSpec(registry.get(KL, cfg.kl.name), cfg.kl.config) if cfg.kl.beta > 0 else None,
        temperature=cfg.rollout.temperature,
        total_steps=cfg.train.total_steps,
        pad_token_id=pad_token_id,
        forward_tokens=cfg.learner.max_tokens_per_forward,
        logprob_forward_tokens=cfg.learner.logprob_forward_tokens,
    )


def build_run(cfg: RunConfig, host: PluginHost, run_dir: Path, *, policy_from: str | Path | None = None,
              warn: Callable[[str], None] | None = None, placement: Placement | None = None) -> RunParts:
    """Load data, model, tokenizer and every plugin component for ``cfg``.

    ``policy_from``: a checkpoint directory (Hugging Face format) whose weights the policy starts
    from instead of ``model.name_or_path`` (resuming). The tokenizer, the engine's initial
    weights and the reference policy still come from ``model.name_or_path``. ``warn``: where the
    parts' warnings during the run go (the console): async verifiers, an evaluation whose every
    episode failed, an environment's episodes and the processes they leave behind. ``placement``:
    where the learner and engines come from (default: the one ``[distributed]`` asks for; a
    sweep's variant: its share of the sweep's base model and engine).
    """
    import transformers

    transformers.utils.logging.disable_progress_bar()  # our own progress display owns the console
    log = get_logger()
    seed_everything(cfg.run.seed)
    if cfg.train.num_threads:
        torch.set_num_threads(cfg.train.num_threads)
    registry = host.registry
    rows = load_rows(cfg, registry)

    model_path = resolve_model_path(cfg, host)
    tokenizer = load_tokenizer(cfg, model_path)
    encoder = PromptEncoder(tokenizer, cfg.data.max_prompt_token_length, cfg.data.apply_chat_template)
    prompts = tokenise_prompt_set(rows.train, rows.eval, encoder, rows.warnings)
    if prompts.dropped:
        log.warning("prompts_too_long_dropped", count=prompts.dropped,
                    max_prompt_token_length=cfg.data.max_prompt_token_length)

    placement = placement if placement is not None else build_placement(cfg)
    try:
        scorer = build_scorer(cfg, registry, placement.scoring_pool(), placement.own_worker_pool())
    except BaseException:
        placement.close()
        raise
    learner: LearnerGroup | None = None
    # Scoring workers start (separate processes) while the models load, not at the first score.
    # Verifiers built in this process (scoring.num_workers = 0) wait until the models are loaded:
    # transformers' loading (a reward model's too) is not safe in two threads at once.
    apart = scorer.num_workers > 0
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="scorer-start") as starter:
        scorer_started = starter.submit(scorer.start if apart else lambda: None)
        try:
            spec = learner_spec(cfg, host, model_path, tokenizer.pad_token_id, policy_from)
            spec = with_budget_plan(cfg, registry, spec, model_path)
            learner = placement.learner_group(spec, cfg.learner, cfg.run.seed)
            budget_note = learner.budget_line
            engine = placement.engines(
                registry.get(ENGINE, cfg.engine.name),
                cfg.engine.config,
                EngineContext(model_path=model_path, tokenizer=tokenizer, dtype=spec.model.torch_dtype,
                              device=spec.model.device, seed=cfg.run.seed,
                              attn_implementation=cfg.model.attn_implementation,
                              overlaps_learner=cfg.rollout.async_steps > 1, adapters=adapter_slots(cfg, registry)),
                cfg.engine.num_engines,
            )
            scorer_started.result()  # re-raises a failed start
            if not apart:
                scorer.start()
        except BaseException:
            concurrent.futures.wait([scorer_started])
            scorer.close()
            if learner is not None:
                learner.close()
            placement.close()
            raise
    sampler = registry.get(SAMPLER, cfg.sampler.name)(cfg.sampler.config, prompts.train, cfg.run.seed)
    trackers = [registry.get(TRACKER, name)(conf, str(run_dir)) for name, conf in cfg.trackers.items()]
    r = cfg.rollout
    params = SamplingParams(n=r.num_samples_per_prompt_rollout, max_new_tokens=r.response_length,
                            temperature=r.temperature, top_p=r.top_p, stop_strings=tuple(r.stop_strings))
    sync = choose_lora_sync(cfg, registry)
    if sync is not None:
        log.info("lora_sync", mode=sync.mode, engine=cfg.engine.name, reason=sync.refusal)
    lora_note = sync.note if sync is not None else None
    notes = [note for note in (budget_note, lora_note, row_verifier_note(cfg, prompts.train)) if note is not None]
    prompts.warnings.extend(unsolvable_warnings(cfg, scorer, prompts.train, prompts.eval))
    if warn is not None:
        scorer.show_warnings_with(warn)
    episodes = build_episode_runner(cfg, registry, tokenizer, engine, params, notes, warn)
    producer = build_producer(cfg, sampler, engine, scorer, encoder, params, episodes)
    traces = TraceWriter(run_dir, cfg.logging.log_rollouts_every, cfg.logging.max_rollout_bytes,
                         lambda ids: tokenizer.decode(list(ids), skip_special_tokens=False),
                         sinks=[t for t in trackers if isinstance(t, LogsCompletions)])
    evaluator = Evaluator(
        engine, scorer, prompts.eval, r.response_length, r.stop_strings,
        num_samples=cfg.eval.num_samples, temperature=cfg.eval.temperature, traces=traces, seed=cfg.run.seed,
        episodes=episodes,
    ) if prompts.eval else None
    if evaluator is not None:
        evaluator.warn = warn
    log.info("run_built", model=model_path, train_rows=len(prompts.train), eval_rows=len(prompts.eval),
             parameters=learner.num_parameters)
    return RunParts(cfg, host, run_dir, prompts, tokenizer, engine, scorer, sampler, learner, trackers,
                    producer, evaluator, traces, placement, notes, episodes)


def build_producer(cfg: RunConfig, sampler: Sampler, engine: GenerationEngine, scorer: RewardScorer,
                   encoder: PromptEncoder, params: SamplingParams, episodes: Any = None) -> RolloutProducer:
    """The single-turn producer, or with ``[environment]`` the episode producer running
    ``episodes`` (:func:`build_episode_runner`)."""
    num_prompts = cfg.rollout.num_unique_prompts_rollout
    env = cfg.environment
    if env is None:
        return RolloutProducer(sampler, engine, scorer, encoder, params, num_prompts, seed=cfg.run.seed)
    from grpo_run.core.rollout.episode_producer import EpisodeProducer
    from grpo_run.core.scoring.metrics import ErrorRateGuard

    assert episodes is not None
    sc = cfg.scoring
    guard = ErrorRateGuard(sc.max_error_rate, sc.error_window, min(sc.error_min_calls, sc.error_window),
                           what="environment")
    return EpisodeProducer(sampler, engine, scorer, encoder, params, num_prompts, seed=cfg.run.seed,
                           runner=episodes, run_seed=cfg.run.seed, env_name=env.name, guard=guard)


def build_episode_runner(cfg: RunConfig, registry: ComponentRegistry, tokenizer: Any, engine: GenerationEngine,
                         params: SamplingParams, notes: list[str] | None = None,
                         warn: Callable[[str], None] | None = None) -> Any:
    """The :class:`EpisodeRunner` of the ``[environment]`` (None without one): training's producer
    and ``grpo-run eval`` build it the same way. ``notes`` hears what the console should say
    about the choices the config left open (see :mod:`grpo_run.core.loop.episode_setup`);
    ``warn``, the runner's warnings and those about processes its episodes leave behind."""
    env = cfg.environment
    if env is None:
        return None
    from grpo_run.core.rollout.env_processes import EnvironmentProcesses
    from grpo_run.core.rollout.episode_runner import EpisodeRunner
    from grpo_run.core.rollout.tool_calls import noted_tools

    processes = EnvironmentProcesses(env.name)
    try:
        with processes.constructing():  # what the constructors start lives until the run ends
            if env.isolation == "process":
                environment = isolated_environment(cfg, registry, processes)
            else:
                tools = noted_tools({name: registry.get(TOOL, name)(conf) for name, conf in cfg.tools.items()})
                try:
                    environment = registry.get(ENVIRONMENT, env.name)(env.config, tools)
                except ValueError as exc:
                    raise UserError(f"environment {env.name!r}: {exc}") from None
        renderer_name, renderer_config, note = chosen_renderer(cfg, registry, tokenizer)
        renderer = registry.get(RENDERER, renderer_name)(renderer_config, tokenizer)
    except BaseException:
        processes.close()
        raise
    if note is not None and notes is not None:
        notes.append(note)
    runner = EpisodeRunner(environment, renderer, engine, env, params,
                           prompt_limit=first_prompt_limit(cfg, tokenizer), context_tokens=context_tokens(cfg, tokenizer),
                           processes=processes)
    runner.warning_sink = processes.warn = warn
    return runner


def first_prompt_limit(cfg: RunConfig, tokenizer: Any) -> Any:
    """The longest first prompt of a driven episode: its segment (the prompt and the episode's
    ``rollout.response_length``) must fit a packed row and the model's context."""
    from grpo_run.core.rollout.chat_session import PromptLimit

    budget = cfg.rollout.response_length
    tokens, why = cfg.algorithm.pack_length - budget, "algorithm.pack_length - rollout.response_length"
    context = getattr(tokenizer, "model_max_length", None)
    if isinstance(context, int) and cfg.data.max_prompt_token_length <= context - budget < tokens:  # unset: 1e30
        tokens, why = context - budget, f"the model's context of {context} - rollout.response_length"
    return PromptLimit.of(tokens, why, tokenizer)


def context_tokens(cfg: RunConfig, tokenizer: Any) -> int:
    """The most ids one episode segment may hold: a learner row (``algorithm.pack_length``) and the
    model's context (the tokenizer's ``model_max_length``, when it is one and not transformers'
    "unset" 1e30)."""
    model = getattr(tokenizer, "model_max_length", None)
    if isinstance(model, int) and 0 < model < 10**8:
        return min(cfg.algorithm.pack_length, model)
    return cfg.algorithm.pack_length


def isolated_environment(cfg: RunConfig, registry: ComponentRegistry, processes: Any) -> Any:
    """The ``[environment]`` in worker processes (``isolation = "process"``)."""
    from grpo_run.core.rollout.env_worker import IsolatedEnvironment, WorkerCallError

    env = cfg.environment
    assert env is not None
    env_cls = registry.get(ENVIRONMENT, env.name)
    if callable(getattr(env_cls, "run_episode", None)):
        raise UserError(f'environment.isolation = "process": environment {env.name!r} drives its own conversation '
                        '(run_episode), which runs on the trainer\'s event loop; use isolation = "thread"')
    tool_specs = {name: (registry.get(TOOL, name), conf) for name, conf in cfg.tools.items()}
    try:
        isolated = IsolatedEnvironment(env_cls, env.config, tool_specs, workers=env.workers,
                                       max_rss_mb=env.max_worker_rss_mb, timeout_s=env.step_timeout_s,
                                       processes=processes)
    except WorkerCallError as exc:
        raise UserError(f"environment {env.name!r}: {exc}") from None
    processes.at_close(isolated.shutdown)
    return isolated


def load_tokenizer(cfg: RunConfig, source: str) -> Any:
    """The tokenizer at ``source`` (a model directory or hub id), with a pad token."""
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(
            source, revision=cfg.model.revision, trust_remote_code=cfg.model.trust_remote_code
        )
    except OSError as exc:  # missing directory, no hub access, missing files
        raise UserError(f"model.name_or_path={cfg.model.name_or_path!r}: cannot load the tokenizer: {exc}") from None
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def build_scorer(cfg: RunConfig, registry: ComponentRegistry, sync_pool: Callable[..., Any] | None = None,
                 own_pool: Callable[..., Any] | None = None) -> RewardScorer:
    """The run's scorer: its enabled verifiers under the ``[scoring]`` settings (its sync verifiers
    in ``sync_pool``, e.g. Ray scoring actors, and those with a worker of their own in ``own_pool``,
    when given)."""
    return RewardScorer.from_config(
        cfg.scoring,
        verifiers={name: (registry.get(VERIFIER, name), conf) for name, conf in cfg.verifiers.items()},
        sync_pool=sync_pool,
        own_pool=own_pool,
    )


def seed_everything(seed: int) -> None:
    random.seed(seed)
    torch.manual_seed(seed)
