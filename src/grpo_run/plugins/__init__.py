"""Built-in plugins. Each subpackage is loaded through the grpo_run entry points."""
