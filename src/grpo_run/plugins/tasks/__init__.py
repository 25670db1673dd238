"""Built-in tasks plugin (registered through the grpo_run entry point 'tasks')."""
