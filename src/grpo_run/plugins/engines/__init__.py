"""Built-in engines plugin (registered through the grpo_run entry point 'engines')."""
