"""Built-in kl plugin (registered through the grpo_run entry point 'kl')."""
