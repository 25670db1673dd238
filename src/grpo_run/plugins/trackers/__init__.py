"""Built-in metric trackers."""

from grpo_run import hookimpl


@hookimpl
def grpo_run_register_trackers(register):
    from grpo_run.plugins.trackers.jsonl import JsonlTracker

    register(JsonlTracker)
