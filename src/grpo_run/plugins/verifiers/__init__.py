"""Built-in verifiers plugin (registered through the grpo_run entry point 'verifiers')."""
