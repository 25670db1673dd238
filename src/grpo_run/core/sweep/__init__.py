"""Sweeps: N LoRA variants of one config trained at once on one base model and one engine, each
the run it is alone (``grpo-run sweep``, ``grpo_run.sweep``; docs/lora.md)."""
