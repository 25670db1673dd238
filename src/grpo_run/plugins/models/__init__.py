"""Built-in models plugin (registered through the grpo_run entry point 'models')."""
