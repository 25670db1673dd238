"""How much of a decode step is transformers' own overhead, and where the rest goes.

    python bench/bench_decode_overhead.py [--threads 1] [--rows 128] [--prompt 20] [--steps 32]
                                          [--repeats 3] [--profile]

One decode step of bench-small's model shape (Llama, hidden 256, 4 layers, 4 heads, MLP 512,
83-token vocabulary, random init, fp32) for ``--rows`` rows, over the hf engine's reserved KV
buffers (``grpo_run.plugins.engines.hf_decode``) after a prefill of ``--prompt`` left-padded
tokens, two ways:

- ``transformers``: the model's own forward, as the hf engine calls it (a 2D mask, position ids,
  the reserved cache);
- ``written out``: the same operators called directly on the model's modules and weights
  (embedding, RMSNorm, RoPE, ``scaled_dot_product_attention`` over the same cache with an
  additive padding mask, the MLP, the output layer), without the model's module calls, mask
  building or output objects.

Their difference is what transformers' Python adds to a step. Both run in turn, ``--repeats``
times, best of each; the logits of the two are compared (max absolute difference). ``--profile``
adds a torch.profiler table (self CPU time by operator) of the written-out step. Asserts nothing.
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F


def build(rows: int, prompt: int, steps: int):
    from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=83, hidden_size=256, intermediate_size=512, num_hidden_layers=4,
                         num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=128,
                         attn_implementation="sdpa")
    model = LlamaForCausalLM(config).eval().requires_grad_(False)
    ids = torch.randint(0, 83, (rows, prompt))
    mask = torch.ones(rows, prompt, dtype=torch.long)
    mask[::3, : prompt // 5] = 0  # a third of the rows left-padded
    positions = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 1)
    return model, config, ids, mask, positions, DynamicCache


def fresh_cache(model, config, ids, mask, positions, cache_class, steps: int):
    from transformers.cache_utils import Cache

    from grpo_run import cache_keyword
    from grpo_run.plugins.engines.hf_decode import reserved_layer_class

    prefill = cache_class(config=config)
    model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True, **{cache_keyword(): prefill})
    rows = torch.arange(len(ids))
    reserved = reserved_layer_class()
    return Cache(layers=[reserved.repeated(layer, rows, ids.shape[1] + steps) for layer in prefill.layers])


def transformers_step(model, token, cache, mask, position):
    from grpo_run import cache_keyword

    out = model(input_ids=token[:, None], attention_mask=mask, position_ids=position[:, None], use_cache=True,
                **{cache_keyword(): cache})
    return out.logits[:, -1].float()


def written_out_step(model, token, cache, mask, position):
    inner, config = model.model, model.config
    rows, heads = len(token), config.num_attention_heads
    head_dim = config.hidden_size // heads
    hidden = inner.embed_tokens(token[:, None])
    freqs = position[:, None, None].float() * inner.rotary_emb.inv_freq[None, None, :]
    angles = torch.cat((freqs, freqs), -1)
    cos, sin = angles.cos()[:, None], angles.sin()[:, None]
    bias = torch.zeros(mask.shape, dtype=hidden.dtype).masked_fill_(mask == 0, float("-inf"))[:, None, None, :]

    def rotate(x):
        first, second = x[..., : head_dim // 2], x[..., head_dim // 2 :]
        return x * cos + torch.cat((-second, first), -1) * sin

    for index, layer in enumerate(inner.layers):
        attention = layer.self_attn
        x = layer.input_layernorm(hidden)
        q, k, v = (proj(x).view(rows, 1, heads, head_dim).transpose(1, 2)
                   for proj in (attention.q_proj, attention.k_proj, attention.v_proj))
        keys, values = cache.layers[index].update(rotate(k), v)
        out = F.scaled_dot_product_attention(rotate(q), keys, values, attn_mask=bias)
        hidden = hidden + attention.o_proj(out.transpose(1, 2).reshape(rows, 1, config.hidden_size))
        x = layer.post_attention_layernorm(hidden)
        mlp = layer.mlp
        hidden = hidden + mlp.down_proj(F.silu(mlp.gate_proj(x)) * mlp.up_proj(x))
    return model.lm_head(inner.norm(hidden))[:, -1].float()


def timed(step, setup, steps: int) -> tuple[float, list[torch.Tensor]]:
    """Seconds per decode step over ``steps - 1`` steps, and the logits of each."""
    model, config, ids, mask, positions, cache_class = setup
    cache = fresh_cache(model, config, ids, mask, positions, cache_class, steps)
    full = torch.ones(len(ids), ids.shape[1] + steps, dtype=torch.long)
    full[:, : ids.shape[1]] = mask
    token = torch.randint(0, 83, (len(ids),), generator=torch.Generator().manual_seed(1))
    logits = []
    start = time.perf_counter()
    for t in range(steps - 1):
        logits.append(step(model, token, cache, full[:, : ids.shape[1] + t + 1], positions[:, -1] + 1 + t))
    return (time.perf_counter() - start) / (steps - 1), logits


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rows", type=int, default=128)
    parser.add_argument("--prompt", type=int, default=20)
    parser.add_argument("--steps", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    setup = build(args.rows, args.prompt, args.steps)
    best = {"transformers": float("inf"), "written out": float("inf")}
    outputs = {}
    with torch.no_grad():
        for _ in range(args.repeats):
            for name, step in (("transformers", transformers_step), ("written out", written_out_step)):
                seconds, outputs[name] = timed(step, setup, args.steps)
                best[name] = min(best[name], seconds)
        diff = max(float((a - b).abs().max()) for a, b in zip(outputs["transformers"], outputs["written out"]))
        print(f"{args.rows} rows, {args.prompt}-token prompts, {args.steps} steps, {args.threads} threads; best of {args.repeats}")
        for name, seconds in best.items():
            print(f"{name:14s} {seconds * 1e3:7.2f} ms per decode step")
        print(f"transformers' share of a step: {1 - best['written out'] / best['transformers']:.1%}; "
              f"logits max |difference| {diff:.2e}")
        if args.profile:
            from torch.profiler import ProfilerActivity, profile

            with profile(activities=[ProfilerActivity.CPU]) as prof:
                timed(written_out_step, setup, args.steps)
            print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
