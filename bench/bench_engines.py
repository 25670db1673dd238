"""Generation engines compared: hf vs vllm tokens/s, and weight-sync time vs parameter count.
Prints figures, asserts nothing.

    GRPO_RUN_VLLM_PYTHON=.venv-vllm/bin/python python bench/bench_engines.py [--repeats N] [--quick]

Models (nothing downloaded): the shipped ``tiny-arithmetic`` (1.1M parameters) and random-init
Llamas with the character vocab built here: ~3M (h256, 4 layers) and ~25M (h512, 8 layers).
Throughput: the same prompts and sampling for both engines -- 32 prompts x 8 samples, T = 1.0,
at most 32 new tokens -- generated tokens per wall second and per CPU second (trainer process
plus, for vLLM, its worker; steadier on a shared machine), median of ``--repeats`` calls after
one warm-up call. vLLM runs as configured by default (compiled, prefix caching) in its worker
process; hf runs its own decode loop in-process. Weight sync: median seconds of ``update_weights`` for
each engine (vLLM: shared-memory buckets + layerwise reload; hf: ``load_state_dict``).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

SIZES = {  # name: (hidden, layers, heads, intermediate)
    "random-3M": (256, 4, 4, 688),
    "random-25M": (512, 8, 8, 1376),
}


def build_models(root: Path, host, quick: bool) -> dict[str, str]:
    from grpo_run.plugins.models.char_tokenizer import build_char_tokenizer
    from grpo_run.plugins.models.tiny_llama import TinyLlamaSize, build_tiny_llama

    source = host.registry.get("model", "tiny-arithmetic")
    models = {"tiny-arithmetic": source(source.Config()).resolve()}
    for name, (hidden, layers, heads, inter) in SIZES.items():
        if quick and name != "random-25M":
            continue
        path = root / name
        tokenizer = build_char_tokenizer(model_max_length=256)
        size = TinyLlamaSize(hidden_size=hidden, num_layers=layers, num_heads=heads, intermediate_size=inter,
                             max_position_embeddings=256)
        build_tiny_llama(size, tokenizer, seed=0).save_pretrained(path)
        tokenizer.save_pretrained(path)
        models[name] = str(path)
    return models


def make_engine(host, kind: str, model_dir: str):
    from transformers import AutoTokenizer

    from grpo_run import EngineContext

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    ctx = EngineContext(model_path=model_dir, tokenizer=tokenizer, dtype=torch.float32, device="cpu", seed=0)
    cls = host.registry.get("engine", kind)
    return cls(cls.Config(), ctx)


def prompts_for(tokenizer, count: int = 32) -> list[list[int]]:
    texts = [tokenizer.apply_chat_template([{"role": "user", "content": f"{i}+{(7 * i) % 50}"}],
                                           add_generation_prompt=True, tokenize=False) for i in range(count)]
    return [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]


def cpu_seconds(engine) -> float:
    """CPU time of this process plus, for vllm, its worker process: on a shared machine tokens per
    CPU-second moves far less with the load than tokens per wall second."""
    total = time.process_time()
    client = getattr(engine, "client", None)  # the vllm engine's worker; hf has none
    if client is not None:
        fields = Path(f"/proc/{client.pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def throughput(engine, prompts, repeats: int) -> tuple[float, float]:
    """(median tokens per wall second, median tokens per CPU second)."""
    from grpo_run import SamplingParams

    params = SamplingParams(n=8, max_new_tokens=32, temperature=1.0)
    asyncio.run(engine.generate(prompts, params))  # warm-up
    rates, cpu_rates = [], []
    for _ in range(repeats):
        start, cpu_start = time.perf_counter(), cpu_seconds(engine)
        out = asyncio.run(engine.generate(prompts, params))
        elapsed, cpu = time.perf_counter() - start, cpu_seconds(engine) - cpu_start
        tokens = sum(len(c.token_ids) for g in out for c in g)
        rates.append(tokens / elapsed)
        cpu_rates.append(tokens / cpu)
    return statistics.median(rates), statistics.median(cpu_rates)


def sync_time(engine, model_dir: str, repeats: int) -> float:
    from transformers import AutoModelForCausalLM

    state = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).state_dict()
    times = []
    for version in range(1, repeats + 2):
        start = time.perf_counter()
        asyncio.run(engine.update_weights(state, version))
        times.append(time.perf_counter() - start)
    return statistics.median(times[1:])  # the first allocates the shared-memory buckets


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="only tiny-arithmetic and random-25M")
    args = parser.parse_args()
    torch.set_num_threads(2)

    from transformers import AutoConfig, AutoTokenizer

    from grpo_run.core.plugins.host import build_plugin_host

    host = build_plugin_host()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, model_dir in build_models(Path(tmp), host, args.quick).items():
            config = AutoConfig.from_pretrained(model_dir)
            from transformers import AutoModelForCausalLM

            params = sum(p.numel() for p in AutoModelForCausalLM.from_config(config).parameters())
            prompts = prompts_for(AutoTokenizer.from_pretrained(model_dir))
            row = {"model": name, "params_M": params / 1e6}
            for kind in ("hf", "vllm"):
                start = time.perf_counter()
                engine = make_engine(host, kind, model_dir)
                row[f"{kind}_start_s"] = time.perf_counter() - start
                try:
                    row[f"{kind}_tok_s"], row[f"{kind}_tok_cpu_s"] = throughput(engine, prompts, args.repeats)
                    row[f"{kind}_sync_s"] = sync_time(engine, model_dir, args.repeats)
                finally:
                    engine.close()
                print(f"  {name} {kind}: {row[f'{kind}_tok_s']:.0f} tok/s, sync {row[f'{kind}_sync_s'] * 1e3:.1f} ms",
                      file=sys.stderr, flush=True)
            rows.append(row)
    print(f"{'model':<16}{'params':>8}{'hf tok/s':>10}{'vllm tok/s':>12}{'hf tok/cpu-s':>14}{'vllm tok/cpu-s':>16}"
          f"{'hf sync ms':>12}{'vllm sync ms':>14}{'vllm start s':>14}")
    for r in rows:
        print(f"{r['model']:<16}{r['params_M']:>7.1f}M{r['hf_tok_s']:>10.0f}{r['vllm_tok_s']:>12.0f}"
              f"{r['hf_tok_cpu_s']:>14.0f}{r['vllm_tok_cpu_s']:>16.0f}"
              f"{r['hf_sync_s'] * 1e3:>12.1f}{r['vllm_sync_s'] * 1e3:>14.1f}{r['vllm_start_s']:>14.1f}")
    print(f"load average at the end: {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
