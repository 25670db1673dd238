"""One short run of the embedded task with everything observable switched on, trained once per
test session and shared (read-only) by the trace, report and eval-command tests.

``examples/arithmetic.toml`` (the tiny-arithmetic model on procedural sums, the math verifier)
for 3 steps: traces every step, eval after steps 0, 2 and 3 on 24 prompts with 4 samples each
for pass@k, a checkpoint every 2 steps.
"""

from __future__ import annotations

from pathlib import Path

from support.paths import EXAMPLES

from grpo_run.cli.main import main

OVERRIDES = (
    "train.total_steps=3", "train.local_eval_every=2", "train.max_runtime_s=0", "optim.warmup_steps=0",
    "task.num_eval=24", "eval.num_samples=4", "logging.log_rollouts_every=1", "logging.progress=false",
    "checkpoint.save_freq=2", "scoring.num_workers=0",
)
GROUPS, GROUP_SIZE = 16, 8  # rollout.num_unique_prompts_rollout, num_samples_per_prompt_rollout of the example

_cache: dict[str, Path] = {}


def observed_run(tmp_path_factory) -> Path:
    """The run directory (trained on first use)."""
    if "run" not in _cache:
        out = tmp_path_factory.mktemp("observed") / "run"
        args = [str(EXAMPLES / "arithmetic.toml"), "--output-dir", str(out)]
        for item in OVERRIDES:
            args += ["--set", item]
        assert main(args) == 0
        _cache["run"] = out
    return _cache["run"]
