"""Built-in trackers plugin (registered through the grpo_run entry point 'trackers')."""
