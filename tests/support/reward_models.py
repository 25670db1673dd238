"""Tiny reward models for tests, built from the shipped ``tiny-arithmetic`` model's shape.

:func:`fit_reward_model` makes a one-label ``LlamaForSequenceClassification`` (h128, 4 layers,
the character tokenizer and chat template), starts its body from tiny-arithmetic's weights and
fits it in a few seconds to score ``a+b=completion`` texts (what the ``reward_model`` verifier
renders for the arithmetic task's rows with :data:`TEMPLATE`) +1 when the completion has a property
and -1 when it has not. (The last character is then the last token, which the one-label head reads:
a property of it is learnt in a few dozen steps.)
"""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path

TEMPLATE = "{prompt}={completion}"
"""The ``template`` the tests' reward models are fitted with."""


def tiny_arithmetic_dir() -> Path:
    from grpo_run.core.plugins.host import build_plugin_host

    source = build_plugin_host().registry.get("model", "tiny-arithmetic")
    return Path(source(source.Config()).resolve())


def random_reward_model(dest: Path, source: Path, *, seed: int = 0, num_labels: int = 1) -> Path:
    """An unfitted sequence classifier (``num_labels`` labels, random head and body) of the shape
    of the Llama model at ``source``, with its tokenizer: fast to build and to run."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForSequenceClassification

    config = LlamaConfig.from_pretrained(source, num_labels=num_labels)
    config.architectures = ["LlamaForSequenceClassification"]
    torch.manual_seed(seed)
    LlamaForSequenceClassification(config).save_pretrained(dest)
    AutoTokenizer.from_pretrained(source).save_pretrained(dest)
    return dest


def fit_reward_model(dest: Path, prefers: Callable[[str], bool] | None, *, steps: int = 100, seed: int = 0) -> Path:
    """Save a reward model at ``dest`` that scores completions with ``prefers(completion)`` high;
    ``prefers=None``: a model whose head is zero, so every text scores exactly 0 (a constant reward)."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForSequenceClassification

    source = tiny_arithmetic_dir()
    config = LlamaConfig.from_pretrained(source, num_labels=1)
    config.architectures = ["LlamaForSequenceClassification"]
    torch.manual_seed(seed)
    model = LlamaForSequenceClassification.from_pretrained(source, config=config)
    tokenizer = AutoTokenizer.from_pretrained(source)
    if prefers is None:
        torch.nn.init.zeros_(model.score.weight)
    else:
        _fit(model, tokenizer, prefers, steps, random.Random(seed))
    model.save_pretrained(dest)
    tokenizer.save_pretrained(dest)
    return dest


def _texts(tokenizer, rng: random.Random, n: int) -> list[tuple[str, str]]:
    """(text, completion) pairs: sums of operands up to 49 answered near the sum."""
    out = []
    for _ in range(n):
        a, b = rng.randint(0, 49), rng.randint(0, 49)
        answer = str(a + b + rng.choice([-2, -1, 0, 0, 1, 1, 2]))
        out.append((TEMPLATE.format(prompt=f"{a}+{b}", completion=answer), answer))
    return out


def _fit(model, tokenizer, prefers: Callable[[str], bool], steps: int, rng: random.Random) -> None:
    import torch

    head = list(model.score.parameters())
    body = [p for name, p in model.named_parameters() if not name.startswith("score.")]
    optimizer = torch.optim.AdamW([{"params": body, "lr": 1e-3}, {"params": head, "lr": 1e-2}])
    model.train()
    for _ in range(steps):
        pairs = _texts(tokenizer, rng, 64)
        batch = tokenizer.pad({"input_ids": tokenizer([t for t, _ in pairs])["input_ids"]},
                              padding_side="right", return_tensors="pt")
        target = torch.tensor([1.0 if prefers(c) else -1.0 for _, c in pairs])
        logits = model(**batch).logits[:, 0]
        loss = torch.nn.functional.mse_loss(logits, target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()


def ends_even(completion: str) -> bool:
    """The property the tests' reward model prefers: the completion's last character is an even digit."""
    return completion[-1:] in "02468" and completion != ""
