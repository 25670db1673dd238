"""The vllm engine's LoRA adapters on disk.

vLLM loads an adapter from a directory (``adapter_config.json`` + ``adapter_model.safetensors``;
loading from memory is private API), so each sync writes the adapter into a private temporary
directory of the engine, one subdirectory per adapter name, and the worker reloads it from there in
place (``load_inplace``). Each file is written beside the old one and renamed over it, so the
worker never reads half a file.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from grpo_run import LoraAdapter

CONFIG_FILE = "adapter_config.json"
WEIGHTS_FILE = "adapter_model.safetensors"


class AdapterFiles:
    """The engine's adapter directory (mode 0700, removed by :meth:`close`)."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="grpo-run-adapters-"))

    def write(self, adapter: LoraAdapter) -> Path:
        """Write ``adapter`` into its subdirectory; returns that directory."""
        directory = self.root / adapter.name
        directory.mkdir(exist_ok=True)
        write_adapter(directory, adapter)
        return directory

    def close(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


def write_adapter(directory: Path, adapter: LoraAdapter) -> None:
    """``adapter`` as a peft adapter directory."""
    from safetensors.torch import save_file

    # Copies: safetensors refuses tensors that share storage (a flat buffer's views do).
    tensors = {name: tensor.detach().to("cpu").clone() for name, tensor in adapter.tensors.items()}
    _replace(directory / WEIGHTS_FILE, lambda path: save_file(tensors, str(path)))
    text = json.dumps(dict(adapter.config), indent=2)
    _replace(directory / CONFIG_FILE, lambda path: path.write_text(text, encoding="utf-8"))


def _replace(target: Path, write: Callable[[Path], object]) -> None:
    partial = target.with_name(target.name + ".partial")
    write(partial)
    os.replace(partial, target)
