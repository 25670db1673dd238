"""The pytest plugin of ``grpo_run.testing`` (entry point ``pytest11``: ``grpo_run``).

pytest loads it in every session of an environment where grpo-run is installed, so it defines
fixtures only and imports nothing heavy until a fixture is used. Disable it with
``-p no:grpo_run``.

Fixtures:

* ``grpo_run_host`` (session): a plugin host built from the installed ``grpo_run`` entry
  points (:func:`grpo_run.core.plugins.host.build_plugin_host`), your own plugin included;
* ``grpo_run_registry`` (session): its component registry (``registry.get("verifier", "math")``);
* ``grpo_run_tiny_model_dir`` (session): a one-layer Llama (hidden size 32) with grpo-run's
  character tokenizer, saved in Hugging Face format in a temporary directory -- built locally,
  nothing is downloaded;
* ``grpo_run_engine_context``: an :class:`~grpo_run.EngineContext` for that model on the CPU
  (float32, seed 0), what :func:`~grpo_run.testing.check_engine` takes.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from grpo_run.core.plugins.host import PluginHost
    from grpo_run.core.plugins.registry import ComponentRegistry
    from grpo_run.core.plugins.types import EngineContext


@pytest.fixture(scope="session")
def grpo_run_host() -> PluginHost:
    """The plugins installed in this environment, loaded as a run loads them."""
    from grpo_run.core.plugins.host import build_plugin_host

    return build_plugin_host()


@pytest.fixture(scope="session")
def grpo_run_registry(grpo_run_host: PluginHost) -> ComponentRegistry:
    """Every registered component class, by family and name."""
    return grpo_run_host.registry


@pytest.fixture(scope="session")
def grpo_run_tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random Llama with the character tokenizer (64 positions), in Hugging Face format."""
    from grpo_run.plugins.models.char_tokenizer import build_char_tokenizer
    from grpo_run.plugins.models.tiny_llama import TinyLlamaSize, build_tiny_llama

    path = tmp_path_factory.mktemp("grpo-run-tiny-model")
    tokenizer = build_char_tokenizer(model_max_length=64)
    size = TinyLlamaSize(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64, max_position_embeddings=64)
    build_tiny_llama(size, tokenizer, seed=0).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def grpo_run_engine_context(grpo_run_tiny_model_dir: Path) -> EngineContext:
    """An engine context for :func:`grpo_run_tiny_model_dir` on the CPU in float32."""
    import torch
    from transformers import AutoTokenizer

    from grpo_run.core.plugins.types import EngineContext

    tokenizer: Any = AutoTokenizer.from_pretrained(grpo_run_tiny_model_dir)
    return EngineContext(model_path=str(grpo_run_tiny_model_dir), tokenizer=tokenizer, dtype=torch.float32,
                         device="cpu", seed=0)
