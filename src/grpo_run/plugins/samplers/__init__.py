"""Built-in samplers plugin (registered through the grpo_run entry point 'samplers')."""
