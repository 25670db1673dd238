"""The built-in model sources: the shipped ``tiny-arithmetic`` checkpoint and ``tiny-random``."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import attrs

from grpo_run import NoConfig
from grpo_run.plugins.models.char_tokenizer import CHARACTERS, SPECIAL_TOKENS, build_char_tokenizer
from grpo_run.plugins.models.tiny_llama import TinyLlamaSize, build_tiny_llama

CHECKPOINTS_DIR = Path(__file__).resolve().parent / "checkpoints"
"""Package data: checkpoints shipped with grpo-run."""

CACHE_ENV = "GRPO_RUN_CACHE"
"""Environment variable naming grpo-run's cache root (default ``~/.cache/grpo_run``)."""

BUILD_VERSION = 1
"""Part of the cache key of built models; bump when the way they are built changes."""


class TinyArithmeticModel:
    """The shipped starting point of the embedded default: a tiny Llama warm-started on addition.

    ``scripts/make_tiny_checkpoint.py`` regenerates it; it was trained for the ``arithmetic``
    task's default config.
    """

    name = "tiny-arithmetic"
    Config = NoConfig
    renderer = "tiny-chat"
    """The chat format of an ``[environment]`` without a ``[renderer]`` table (the char model's)."""

    def __init__(self, config: NoConfig) -> None:
        self.config = config

    def resolve(self) -> str:
        """The checkpoint directory inside the installed package."""
        path = CHECKPOINTS_DIR / self.name
        if not (path / "config.json").is_file():
            raise FileNotFoundError(
                f"the shipped checkpoint {self.name!r} is missing from {path}; "
                "reinstall grpo-run or run scripts/make_tiny_checkpoint.py"
            )
        return str(path)


@attrs.frozen
class TinyRandomConfig(TinyLlamaSize):
    """Shape (the fields of :class:`TinyLlamaSize`) and seed of the ``tiny-random`` model."""

    seed: int = attrs.field(default=0, validator=attrs.validators.instance_of(int))
    """Seed of the random initialisation."""

    def size(self) -> TinyLlamaSize:
        """The model shape part of this config."""
        fields = attrs.fields_dict(TinyLlamaSize)
        return TinyLlamaSize(**{k: v for k, v in attrs.asdict(self).items() if k in fields})


def cache_root() -> Path:
    """grpo-run's cache root: ``$GRPO_RUN_CACHE`` or ``~/.cache/grpo_run``."""
    env = os.environ.get(CACHE_ENV)
    return Path(env).expanduser() if env else Path.home() / ".cache" / "grpo_run"


class TinyRandomModel:
    """A randomly initialised tiny Llama with the character tokenizer, built once and cached.

    The directory is ``<cache root>/models/tiny-random-<hash>``, the hash covering the config,
    the vocabulary and :data:`BUILD_VERSION`; it is written to a temporary directory and renamed
    into place, so a reader never sees a half-written model.
    """

    name = "tiny-random"
    Config = TinyRandomConfig
    renderer = "tiny-chat"
    """The chat format of an ``[environment]`` without a ``[renderer]`` table (the char model's)."""

    def __init__(self, config: TinyRandomConfig) -> None:
        self.config = config

    def cache_dir(self) -> Path:
        """Where this config's model lives (whether or not it was built yet)."""
        key = json.dumps(
            {"config": attrs.asdict(self.config), "vocab": SPECIAL_TOKENS + CHARACTERS, "build": BUILD_VERSION},
            sort_keys=True,
        )
        digest = hashlib.sha256(key.encode()).hexdigest()[:16]
        return cache_root() / "models" / f"{self.name}-{digest}"

    def resolve(self) -> str:
        """Build the model into the cache unless it is there already; return its directory."""
        final = self.cache_dir()
        if not (final / "config.json").is_file():
            build_atomically(final, self._write)
        return str(final)

    def _write(self, out: Path) -> None:
        size = self.config.size()
        tokenizer = build_char_tokenizer(model_max_length=size.max_position_embeddings)
        model = build_tiny_llama(size, tokenizer, seed=self.config.seed)
        model.save_pretrained(out)
        tokenizer.save_pretrained(out)


def build_atomically(final: Path, write: Callable[[Path], None]) -> None:
    """Run ``write`` on a fresh temporary directory beside ``final`` and rename it to ``final``,
    so a reader never sees a half-written model; the temporary directory goes either way."""
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}-", dir=final.parent))
    try:
        write(tmp)
        try:
            os.rename(tmp, final)
        except OSError:
            if not (final / "config.json").is_file():
                raise
            # Another process built the same model first; theirs is identical.
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
