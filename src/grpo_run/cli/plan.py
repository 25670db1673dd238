"""``grpo-run plan CONFIG``: what a run will hold in memory, by process and part, before it runs.

    grpo-run plan CONFIG.toml [--set key=value ...] [--vary key=v1,v2 ...] [--device cuda|cpu]
                              [--memory 24GiB] [--gpus N] [--json] [--simulate]

Loads no weights: the model's ``config.json`` gives its shape, and the learner's micro-batch
costs are measured on fake tensors (:mod:`grpo_run.core.learner.probe`). Exit 0 when it fits,
1 with one line saying what to change when it does not, 2 for a bad config or argument.
``--simulate`` also runs the learner step itself on fake tensors and prints its peak beside the
plan's (docs/memory.md). ``--vary`` plans the sweep of those variations (``grpo-run sweep``): the
base model once, every variant's adapter and optimizer state, one variant's gradients at a time,
and the engine's batch of every variant's requests, for the largest variant.
"""

from __future__ import annotations

import argparse
import json
import re

import attrs

from rich.console import Console
from rich.table import Table
from rich.text import Text

from grpo_run.core.errors import UserError
from grpo_run.core.memory.plan import GIB, ProcessPlan, gib
from grpo_run.core.memory.run_plan import UNKNOWN, RunPlan, capacity_lines, rollout_shape
from grpo_run.core.plugins.host import PluginHost

_UNITS = {"": GIB, "g": GIB, "gi": GIB, "gib": GIB, "gb": 10**9, "m": 2**20, "mi": 2**20, "mib": 2**20,
          "mb": 10**6, "t": 2**40, "tib": 2**40, "tb": 10**12}


def add_plan_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("plan", help="the memory a run needs, by process and part, and the token budget that fits")
    p.add_argument("config", help="path to the TOML config")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config value, e.g. --set rollout.num_unique_prompts_rollout=32 (repeatable)")
    p.add_argument("--vary", action="append", default=[], metavar="KEY=V1,V2",
                   help="plan the sweep of these variations (grpo-run sweep's --vary; repeatable)")
    p.add_argument("--device", help="cuda or cpu: where the learner runs (default: model.device; \"auto\" is CUDA "
                                     "where one is visible)")
    p.add_argument("--memory", metavar="SIZE",
                   help="memory of one device, e.g. 24GiB or 80GB (default: this machine's GPU, or the RAM available)")
    p.add_argument("--gpus", type=_positive, default=None, metavar="N", help="GPUs on the machine (default: learner.num_learners)")
    p.add_argument("--host-memory", metavar="SIZE",
                   help="the host's memory, for what a CUDA run keeps there (default: this machine's RAM available, "
                        "unless --memory plans another machine's GPUs; then it is not checked)")
    p.add_argument("--json", action="store_true", help="print the plan as one JSON object")
    p.add_argument("--simulate", action="store_true",
                   help="also run the learner step on fake tensors and print its peak beside the plan's")


def parse_size(text: str, option: str = "--memory") -> float:
    """``"24GiB"``, ``"80 GB"``, ``"512MiB"``, ``"24"`` (GiB) -> bytes; a :class:`UserError` otherwise."""
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", text)
    unit = match.group(2).lower() if match else None
    if match is None or unit not in _UNITS or float(match.group(1)) <= 0:
        raise UserError(f"{option} {text!r}: expected a size such as 24GiB, 80GB or 512MiB")
    return float(match.group(1)) * _UNITS[unit]


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return value


def run_plan_command(args: argparse.Namespace, host: PluginHost) -> int:
    import time

    import psutil
    import torch

    from grpo_run.core.config import load_config
    from grpo_run.core.errors import ConfigError, ConfigIssue
    from grpo_run.core.loop.build import learner_spec, resolve_model_path
    from grpo_run.core.loop.memory_setup import model_config, plan_inputs
    from grpo_run.core.loop.preflight import context_issues, model_path_issues
    from grpo_run.core.memory.advice import advise
    from grpo_run.core.memory.run_plan import plan_run
    from grpo_run.core.memory.shapes import ModelShape

    started = time.perf_counter()
    if args.device not in (None, "cuda", "cpu"):
        raise UserError(f"--device {args.device!r}: expected cuda or cpu")
    capacity = parse_size(args.memory) if args.memory is not None else None
    aside: list[ConfigIssue] = []
    cfg = load_config(args.config, host.registry, args.overrides, set_aside=aside)
    overrides = list(args.overrides)
    if args.device == "cuda" and not cfg.model.device.startswith("cuda"):  # plan it as the CUDA machine will run it
        overrides.append('model.device="cuda"')
        aside = []
        cfg = load_config(args.config, host.registry, overrides, set_aside=aside)
    variants = 1
    if args.vary:
        cfg, variants = _largest_variant(args.config, args.vary, overrides, host, aside)
    issues = model_path_issues(cfg.model.name_or_path, host.registry)
    if issues:
        raise ConfigError(args.config, issues)
    device = args.device or _device_kind(cfg.model.device, torch.cuda.is_available())
    if capacity is None and device == "cuda":
        if not torch.cuda.is_available():
            raise UserError("--memory: there is no CUDA device here to read its memory from; say how much one has, e.g. --memory 80GiB")
        capacity = float(torch.cuda.get_device_properties(0).total_memory)
    elif capacity is None:
        capacity = float(psutil.virtual_memory().available)
    model_path = resolve_model_path(cfg, host)
    config = model_config(model_path, cfg)
    shape = ModelShape.from_config(config, source=f"model {cfg.model.name_or_path!r}")
    issues = context_issues(cfg, shape.context)
    if issues:
        raise ConfigError(args.config, issues)
    spec = learner_spec(cfg, host, model_path, int(getattr(config, "pad_token_id", None) or 0), device=device)
    runtime = float(psutil.Process().memory_info().rss) if device == "cpu" else 0.0
    gpus = args.gpus or max(cfg.learner.num_learners, _gpus_named(cfg))
    if args.host_memory is not None:
        host_memory = parse_size(args.host_memory, "--host-memory")
    elif device == "cuda" and args.memory is not None:
        host_memory = UNKNOWN  # another machine's host: not known here
    else:
        host_memory = float(psutil.virtual_memory().available)
    inputs = plan_inputs(cfg, spec, config, device=device, capacity=capacity, runtime_bytes=runtime, gpus=gpus,
                         shape=shape, host_capacity=host_memory)
    inputs = attrs.evolve(inputs, variants=variants)
    plan = plan_run(cfg, host.registry, inputs)
    if aside:
        notes = [f"set aside for this plan: {i.path}: {i.message}" for i in aside]
        plan = attrs.evolve(plan, notes=(*plan.notes, *notes))
    if not plan.fits:
        def accept(suggested: tuple[str, ...]) -> bool:  # the suggestion passes the config's own rules
            try:
                load_config(args.config, host.registry, [*overrides, *suggested], set_aside=[])
            except ConfigError:
                return False
            return True

        plan = advise(cfg, host.registry, inputs, plan, accept)
    seconds = time.perf_counter() - started
    simulated = _simulate(cfg, host, inputs, spec, config, plan, device) if args.simulate else None
    if args.json:
        out = plan.to_json()
        out["model"] = {"params": inputs.shape.params, "layers": inputs.shape.layers, "hidden": inputs.shape.hidden,
                        "vocab": inputs.shape.vocab, "context": inputs.shape.context}
        out["seconds"] = round(seconds, 2)
        out["variants"] = variants
        if simulated is not None:
            out["simulated"] = simulated
        print(json.dumps(out))
    else:
        _print(Console(highlight=False), args.config, cfg, inputs, plan, simulated, seconds)
    return 0 if plan.fits else 1


def _largest_variant(path: str, vary: list[str], overrides: list[str], host: PluginHost, aside: list) -> tuple:
    """(the config of the sweep's variant that needs the most memory, the number of variants)."""
    from pathlib import Path

    from grpo_run.core.config.loading import apply_overrides, read_toml
    from grpo_run.core.sweep.configs import variant_configs
    from grpo_run.core.sweep.variants import parse_vary, variants_of

    data = apply_overrides(read_toml(Path(path)), overrides)
    configs = variant_configs(data, variants_of(parse_vary(vary)), host.registry, path, set_aside=aside)

    def need(cfg) -> tuple[int, int]:
        rollout = rollout_shape(cfg)
        return (cfg.model.lora.r if cfg.model.lora is not None else 0, rollout.tokens)

    return max((c.cfg for c in configs), key=need), len(configs)


def _gpus_named(cfg) -> int:
    """GPUs the config names itself (an engine's ``device = "cuda:3"`` means at least 4)."""
    device = str(getattr(cfg.engine.config, "device", "") or "")
    return int(device.split(":")[1]) + 1 if device.startswith("cuda:") else 0


def _device_kind(name: str, cuda_here: bool) -> str:
    if name == "auto":
        return "cuda" if cuda_here else "cpu"
    return "cuda" if name.startswith("cuda") else "cpu"


def learner_step_bytes(process: ProcessPlan) -> float:
    """The part of a learner process that a simulated learner step holds: weights, optimizer
    state, reference policy and the learner's phases (not the interpreter, the rollout batch or
    an engine beside it)."""
    learner_parts = ("weights", "LoRA adapters", "optimizer state", "master weights", "reference policy")
    resident = sum(p.bytes for p in process.resident if p.name in learner_parts)
    learner_phases = [sum(p.bytes for p in parts) for name, parts in process.phases if name != "generation"]
    return resident + max(learner_phases, default=0.0)


def _simulate(cfg, host, inputs, spec, config, plan: RunPlan, device: str) -> dict[str, float]:
    from grpo_run.core.learner.simulate import simulate_step
    from grpo_run.core.memory.run_plan import plan_run

    budgeted = attrs.evolve(spec, forward_tokens=plan.budget, logprob_forward_tokens=plan.logprob_budget)
    result = simulate_step(budgeted, config, rollout_shape(cfg), device=device, learner=cfg.learner)
    compared = plan
    if cfg.learner.strategy == "deepspeed" and cfg.learner.stage == 3 and cfg.learner.num_learners > 1:
        # ZeRO-3 is simulated as fsdp2 (DeepSpeed does not run on fake tensors): compare with that plan.
        fsdp2 = attrs.evolve(cfg.learner, strategy="fsdp2", zero_stage=None, offload_optimizer=False)
        same_budget = attrs.evolve(fsdp2, max_tokens_per_forward=plan.budget, max_tokens_per_logprob_forward=plan.logprob_budget)
        compared = plan_run(attrs.evolve(cfg, learner=same_budget), host.registry, inputs)
    planned = learner_step_bytes(compared.processes[0])
    return {"learner_step_peak_bytes": float(result.peak), "planned_learner_step_bytes": planned,
            "difference": planned / result.peak - 1 if result.peak else 0.0,
            "micro_batches": result.micro_batches, "seconds": result.seconds, "rank": result.rank}


def _print(console: Console, path: str, cfg, inputs, plan: RunPlan, simulated: dict | None, seconds: float) -> None:
    shape, rollout = inputs.shape, rollout_shape(cfg)
    console.print(Text(f"{path}: memory plan for {inputs.device} ({gib(inputs.capacity)}"
                       f"{' available' if inputs.device == 'cpu' else f' per device, {plan.gpus} GPUs'})"))
    console.print(Text(f"model {cfg.model.name_or_path}: {shape.params / 1e6:,.1f}M params, {shape.layers} layers, "
                       f"hidden {shape.hidden}, vocabulary {shape.vocab:,}; {cfg.model.dtype}"
                       f"{', autocast ' + cfg.model.autocast if cfg.model.autocast != 'none' else ''}"))
    console.print(Text(f"rollout batch: {rollout.prompts} prompts x {rollout.samples} samples x up to "
                       f"{rollout.prompt_tokens} + {rollout.response_tokens} tokens = {rollout.tokens:,} tokens"))
    if inputs.variants > 1:
        console.print(Text(f"sweep: {inputs.variants} variants on one base model (planned as the largest): "
                           f"{inputs.variants} adapters and optimizer states, one variant's gradients at a time, "
                           f"the engine generating {inputs.variants} x {rollout.sequences} sequences together"))
    for process, last in _grouped(plan.processes):
        name, where = process.name, process.device
        if last is not process:
            name = f"{process.name.split(' rank ')[0]} ranks {process.name.split(' rank ')[-1]} to {last.name.split(' rank ')[-1]}"
            where = f"{process.device} to {last.device}, each"
        table = Table(title=f"{name} on {where}: peak {gib(process.peak)}"
                            + (f" (in the {process.peak_phase})" if process.peak_phase else ""), title_justify="left")
        for column in ("part", "size", "how"):
            table.add_column(column, justify="right" if column == "size" else "left")
        for part in process.resident:
            table.add_row(part.name, gib(part.bytes), Text(part.note))
        for phase, parts in process.phases:
            inside = ", ".join(f"{p.name} {gib(p.bytes)}" + (f" ({p.note})" if p.note else "") for p in parts if p.bytes)
            when = "beside the others" if phase in process.adds_up else "one at a time"
            table.add_row(Text(f"{phase} ({when})", style="italic"), "+" + gib(sum(p.bytes for p in parts)), Text(inside))
        console.print(table)
    cost = inputs.costs
    console.print(Text(f"a training forward costs {gib(cost.train.at(4096) - cost.train.at(0))} per 4,096 tokens "
                       f"({'with' if _checkpointing(cfg, inputs.device) else 'without'} gradient checkpointing)"))
    source = "auto: the most that fits" if plan.budget_source == "auto" else "set"
    console.print(Text(f"token budget: {plan.budget:,} tokens per forward ({source}); the largest that fits: "
                       f"{plan.largest_budget:,}; log-prob passes: {plan.logprob_budget:,} "
                       f"(one rank's mini-batch: {plan.tokens_per_mini_batch:,} tokens)"))
    for line in capacity_lines(plan):
        console.print(Text(line))
    for note in plan.notes:
        console.print(Text(f"note: {note}", style="dim"))
    console.print(Text(f"planned in {seconds:.1f} s", style="dim"))
    if simulated is not None:
        console.print(Text(f"simulated learner step ({simulated['rank']}): peak "
                           f"{gib(simulated['learner_step_peak_bytes'])}, planned "
                           f"{gib(simulated['planned_learner_step_bytes'])} ({simulated['difference']:+.0%}); "
                           f"{simulated['micro_batches']:.0f} micro-batches, {simulated['seconds']:.0f} s"))
    if plan.fits:
        console.print(Text("fits", style="bold green"))
        return
    console.print(Text.assemble(("does not fit: ", "bold red"), plan.advice or ""), soft_wrap=True)
    if plan.suggested:
        console.print(Text("what fits, as overrides:"))
        for override in plan.suggested:
            console.print(Text(f"  --set {override}"), soft_wrap=True)


def _grouped(processes):
    """``(first, last)`` of each run of identical learner ranks (the others alone)."""
    out, i = [], 0
    while i < len(processes):
        j = i
        while (j + 1 < len(processes) and " rank " in processes[i].name and " rank " in processes[j + 1].name
               and processes[j + 1].same_as(processes[i])):
            j += 1
        out.append((processes[i], processes[j]))
        i = j + 1
    return out


def _checkpointing(cfg, device: str) -> bool:
    setting = cfg.model.gradient_checkpointing
    return device == "cuda" if setting == "auto" else bool(setting)
