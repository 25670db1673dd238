"""Built-in losses plugin (registered through the grpo_run entry point 'losses')."""
