"""The memory plan beside the learner step simulated on fake tensors, for GPU shapes, on any machine.

    python bench/bench_memory_plan.py [--sizes 360m,1.7b] [--memory 80GiB] [--settings defaults,unbounded]
    python bench/bench_memory_plan.py --examples [--simulate 135m,360m]   # docs/memory.md's worked examples

For random-init SmolLM2-360M- and -1.7B-shaped models (bench/cuda_models.py; only their
``config.json`` is written) at 16 prompts x 8 samples x (32 + 256) tokens -- the batch of the one
set of H200 figures (docs/gpu.md) -- prints, per setting, the plan's learner step (weights,
optimizer state, reference and the learner's largest phase: what a simulation holds), the
simulated peak of two learner steps, their difference, and the plan's verdict on a device of
``--memory``:

* ``defaults``: the config's defaults on CUDA (bf16 autocast over fp32 weights, gradient
  checkpointing on, ``max_tokens_per_forward = "auto"``);
* ``unbounded``: the learner the H200 figures were measured with: one forward per mini-batch, no
  checkpointing, real ``[tokens, vocabulary]`` logits (as for a model that post-processes its
  logits: the plan measures and the simulation runs that path here). Measured on the H200: 75.3 GiB peak for 360M,
  out of memory at 139.7 GiB for 1.7B.

``--examples``: the plan with the defaults on CUDA for 135M to 7B models (SmolLM2's and
Qwen2.5's published shapes) at 16 prompts x 8 samples x (256 + 1024) tokens, on a 24 GB and an
80 GB card; ``--simulate`` the sizes whose learner step is also simulated (minutes each).

Seconds per plan, up to a few minutes per simulation on two cores. Asserts nothing.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from cuda_models import SHAPES  # noqa: E402

H200 = {"360m": "75.3 GiB", "1.7b": "OOM at 139.7 GiB"}
EXAMPLE_SHAPES = {
    # Published configs: SmolLM2 (Llama architecture, tied embeddings) and Qwen2.5.
    "135m": {"vocab_size": 49152, "hidden_size": 576, "intermediate_size": 1536, "num_hidden_layers": 30,
             "num_attention_heads": 9, "num_key_value_heads": 3, "tie_word_embeddings": True},
    "360m": {"vocab_size": 49152, "tie_word_embeddings": True, **SHAPES["360m"]},
    "0.5b": {"vocab_size": 151936, "hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24,
             "num_attention_heads": 14, "num_key_value_heads": 2, "tie_word_embeddings": True},
    "1.7b": {"vocab_size": 49152, "tie_word_embeddings": True, **SHAPES["1.7b"]},
    "7b": {"vocab_size": 152064, "hidden_size": 3584, "intermediate_size": 18944, "num_hidden_layers": 28,
           "num_attention_heads": 28, "num_key_value_heads": 4, "tie_word_embeddings": False},
}
EXAMPLE_BATCH = ["rollout.num_unique_prompts_rollout=16", "rollout.num_samples_per_prompt_rollout=8",
                 "data.max_prompt_token_length=256", "rollout.response_length=1024", "algorithm.pack_length=4096"]
SETTINGS = {
    "defaults": [],
    "unbounded": ["learner.max_tokens_per_forward=0", "model.gradient_checkpointing=false"],
}
CONFIG = """
[model]
name_or_path = "{model}"
device = "cuda"
autocast = "bfloat16"

[task]
name = "arithmetic"

[data]
max_prompt_token_length = 32

[rollout]
num_unique_prompts_rollout = 16
num_samples_per_prompt_rollout = 8
response_length = 256

[algorithm]
pack_length = 2048

[verifiers.math]
weight = 1.0
"""


def one(size: str, setting: str, memory: float, workdir: Path, *, shape: dict | None = None,
        extra: list[str] = (), simulate: bool = True) -> dict:
    import attrs
    from transformers import LlamaConfig

    from grpo_run.cli.plan import learner_step_bytes
    from grpo_run.core.config import load_config
    from grpo_run.core.learner.simulate import simulate_step
    from grpo_run.core.loop.build import learner_spec
    from grpo_run.core.loop.memory_setup import model_config, plan_inputs
    from grpo_run.core.memory.run_plan import plan_run, rollout_shape
    from grpo_run.core.plugins.host import build_plugin_host

    model = workdir / size
    if not (model / "config.json").exists():
        shape = shape or {"vocab_size": 49152, "tie_word_embeddings": True, **SHAPES[size]}
        LlamaConfig(max_position_embeddings=8192, **shape).save_pretrained(model)
    path = workdir / "run.toml"
    path.write_text(CONFIG.format(model=model))
    host = build_plugin_host()
    cfg = load_config(str(path), host.registry, SETTINGS[setting] + list(extra))
    config = model_config(str(model), cfg)
    spec = learner_spec(cfg, host, str(model), 0, device="cuda")
    from grpo_run.core.learner.probe import activation_costs

    costs = activation_costs(spec, config, rollout_shape(cfg), device="cuda", full_logits=setting == "unbounded")
    plan = plan_run(cfg, host.registry, plan_inputs(cfg, spec, config, device="cuda", capacity=memory, costs=costs))
    planned = learner_step_bytes(plan.processes[0])
    if not simulate:
        return {"planned": planned, "simulated": None, "process": plan.processes[0].peak, "fits": plan.fits,
                "budget": plan.budget, "advice": plan.advice, "params": inputs_params(config)}
    spec = attrs.evolve(spec, forward_tokens=plan.budget, logprob_forward_tokens=plan.logprob_budget)
    simulated = simulate_step(spec, config, rollout_shape(cfg), device="cuda", full_logits=setting == "unbounded")
    return {"planned": planned, "simulated": simulated.peak, "micro": simulated.micro_batches,
            "seconds": simulated.seconds, "process": plan.processes[0].peak, "fits": plan.fits,
            "budget": plan.budget, "advice": plan.advice, "params": inputs_params(config)}


def inputs_params(config) -> int:
    from grpo_run.core.memory.shapes import ModelShape

    return ModelShape.from_config(config).params


def examples(simulated: set[str]) -> None:
    from grpo_run.cli.plan import parse_size

    gib = 2**30
    print("16 prompts x 8 samples x (256 + 1024) tokens, CUDA defaults (fp32 weights + bf16 autocast, "
          "checkpointing on, auto budget), hf engine beside the learner")
    print("| model | params | card | plan: trainer peak | budget (tokens per forward) | verdict | simulated learner step |")
    print("|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for size, shape in EXAMPLE_SHAPES.items():
            for memory in ("24GiB", "80GiB"):
                r = one(size, "defaults", parse_size(memory), Path(tmp), shape=shape, extra=EXAMPLE_BATCH,
                        simulate=size in simulated)
                verdict = "fits" if r["fits"] else "does not fit: " + (r["advice"] or "").split("; ", 1)[-1]
                sim = (f"{r['simulated'] / gib:.1f} GiB (plan {r['planned'] / r['simulated'] - 1:+.0%})"
                       if r["simulated"] else "-")
                print(f"| {size} | {r['params'] / 1e6:,.0f}M | {memory} | {r['process'] / gib:.1f} GiB | {r['budget']:,} | "
                      f"{verdict} | {sim} |", flush=True)


def main() -> int:
    from grpo_run.cli.plan import parse_size

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="360m,1.7b")
    parser.add_argument("--settings", default="defaults,unbounded")
    parser.add_argument("--memory", default="80GiB", help="one device's memory for the verdict")
    parser.add_argument("--examples", action="store_true", help="docs/memory.md's worked examples")
    parser.add_argument("--simulate", default="", help="with --examples: the sizes to simulate too (e.g. 135m,360m)")
    args = parser.parse_args()
    if args.examples:
        examples(set(filter(None, args.simulate.split(","))))
        return 0
    memory = parse_size(args.memory)
    gib = 2**30
    print(f"| shape | setting | budget | plan: learner step | simulated | plan / simulated | micro-batches | "
          f"trainer process (+ hf engine) | on {args.memory} | measured on one H200 |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for size in args.sizes.split(","):
            for setting in args.settings.split(","):
                r = one(size, setting, memory, Path(tmp))
                verdict = "fits" if r["fits"] else "does not fit"
                sim = r["simulated"] or float("nan")
                print(f"| {size} | {setting} | {r['budget']:,} | {r['planned'] / gib:.1f} GiB | {sim / gib:.1f} GiB | "
                      f"{r['planned'] / sim - 1:+.0%} | {r.get('micro', 0):.0f} | {r['process'] / gib:.1f} GiB | {verdict} | "
                      f"{H200[size] if setting == 'unbounded' else 'not measured'} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
