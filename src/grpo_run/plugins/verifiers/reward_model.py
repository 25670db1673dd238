"""The ``reward_model`` verifier: a trained reward model (a one-label
``AutoModelForSequenceClassification``) scores each completion.

Built once per process that runs it -- a scoring worker of its own (the config asks for one,
:class:`~grpo_run.OwnWorker`), a Ray actor of its own under ``distributed.backend = "ray"``, or
the training process with ``scoring.num_workers = 0`` -- and never again per call. Each batch the
scorer sends (at most ``batch_size`` completions) is one forward: the texts are rendered
(:meth:`RewardModelVerifier.text`), tokenised, cut from the left to ``max_length`` tokens, padded
on the right, and the head's logit is the raw score. The raw score goes back to the training
process, where the config's rescaler (``transform``, ``clip``; :mod:`.reward_model_scaling`) makes
it the score.

Metrics per completion: ``raw_score``, ``truncated`` (1 when tokens were cut) and
``truncated_tokens``, averaged per step under ``verifier/reward_model/``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from grpo_run import MemoryPart, MemoryRequest, VerifierResult
from grpo_run.plugins.verifiers.reward_model_config import BYTES, RewardModelConfig
from grpo_run.plugins.verifiers.reward_model_files import KEY, classifier_problem, local_path, model_size

__all__ = ["RewardModelConfig", "RewardModelVerifier"]


class RewardModelVerifier:
    """Scores completions with a reward model (the guide: docs/verifiers.md)."""

    name: ClassVar[str] = "reward_model"
    Config: ClassVar[type] = RewardModelConfig

    def __init__(self, config: RewardModelConfig) -> None:
        import torch
        import transformers

        self.config = config
        self.forwards = 0
        """Forward passes run so far (one per batch of at most ``batch_size`` texts)."""
        self.device = resolve_device(config.device)
        transformers.utils.logging.disable_progress_bar()  # the run's console is not ours
        transformers.utils.logging.set_verbosity_error()
        self.tokenizer, self.model = load_reward_model(config, getattr(torch, _dtype(config)), self.device)
        self.chat = self.tokenizer.chat_template is not None and config.template is None

    @classmethod
    def memory_parts(cls, config: RewardModelConfig, request: MemoryRequest) -> list[MemoryPart]:
        """Its weights and one forward of ``batch_size`` texts of ``max_length`` tokens (no
        gradients), in its scoring worker; counted from ``config.json`` (the model class built on
        torch's meta device), no weights read."""
        parameters, hidden = model_size(config.model, revision=config.revision, trust_remote_code=config.trust_remote_code)
        width = BYTES[_dtype(config)]
        device = "" if config.device == "auto" else ("cuda:0" if config.device == "cuda" else config.device)
        tokens = config.batch_size * config.max_length
        # A forward without gradients holds a few hidden-sized tensors per token at its widest.
        forward = tokens * hidden * 8 * width
        return [
            MemoryPart("weights", parameters * width, f"{parameters / 1e6:,.1f}M params x {width} bytes",
                       own_process=True, device=device),
            MemoryPart("one forward", forward, f"{config.batch_size} x {config.max_length} tokens", transient=True,
                       own_process=True, device=device),
        ]

    def score_batch(self, items: Sequence[tuple[str, Any, Mapping[str, Any]]]) -> list[VerifierResult]:
        """Raw scores of ``items``, ``batch_size`` per forward."""
        size = self.config.batch_size
        results: list[VerifierResult] = []
        for start in range(0, len(items), size):
            results += self._forward([self.text(completion, row) for completion, _, row in items[start:start + size]])
        return results

    def text(self, completion: str, row: Mapping[str, Any]) -> str:
        """What the reward model reads for ``completion`` of ``row``: its chat template over the
        row's chat (or its prompt as one user turn) and the completion as the assistant's turn; the
        ``template``; or, without either, the prompt followed by the completion."""
        prompt = row.get("messages", row.get("prompt"))
        if self.chat:
            chat = [dict(m) for m in prompt] if isinstance(prompt, Sequence) and not isinstance(prompt, str) else (
                [{"role": "user", "content": prompt}] if isinstance(prompt, str) else [])
            return self.tokenizer.apply_chat_template([*chat, {"role": "assistant", "content": completion}],
                                                      tokenize=False)
        if self.config.template is not None:
            return self.config.template.format(prompt=prompt_text(prompt), completion=completion)
        return prompt_text(prompt) + completion

    def _forward(self, texts: list[str]) -> list[VerifierResult]:
        import torch

        limit = self.config.max_length
        # A chat template writes the special tokens itself; plain text gets the tokenizer's own.
        ids = self.tokenizer(texts, add_special_tokens=not self.chat)["input_ids"]
        cut = [max(0, len(x) - limit) for x in ids]
        batch = self.tokenizer.pad({"input_ids": [x[c:] for x, c in zip(ids, cut, strict=True)]},
                                   padding=True, padding_side="right", return_tensors="pt")
        with torch.inference_mode():
            logits = self.model(input_ids=batch["input_ids"].to(self.device),
                                attention_mask=batch["attention_mask"].to(self.device)).logits
        self.forwards += 1
        raw = logits[:, 0].float().cpu().tolist()
        return [VerifierResult(score=r, metrics={"raw_score": r, "truncated": float(c > 0), "truncated_tokens": float(c)})
                for r, c in zip(raw, cut, strict=True)]


def prompt_text(prompt: Any) -> str:
    """A row's prompt as text: a string as it is, a chat's last user message, else ``""``."""
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, Sequence):
        for message in reversed(prompt):
            if isinstance(message, Mapping) and message.get("role") == "user" and isinstance(message.get("content"), str):
                return message["content"]
    return ""


def _dtype(config: RewardModelConfig) -> str:
    return "float32" if config.dtype == "auto" else config.dtype


def resolve_device(name: str) -> str:
    """``"auto"``: CUDA when this process sees a GPU, else the CPU; a CUDA device that is not
    there is a :class:`ValueError` naming the key."""
    import torch

    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if name.startswith("cuda"):
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        index = int(name.partition(":")[2] or 0)
        if index >= count:
            hint = "; in a Ray actor, num_gpus gives it GPUs" if count == 0 else ""
            raise ValueError(f"{KEY}.device = {name!r}: no such CUDA device ({count} visible to the scoring worker){hint}")
    return name


def load_reward_model(config: RewardModelConfig, dtype: Any, device: str) -> tuple[Any, Any]:
    """The tokenizer (with a pad token) and the model in eval mode on ``device``; a checkpoint that
    is missing or no one-label classifier is a :class:`ValueError` naming the key."""
    from transformers import AutoConfig, AutoModelForSequenceClassification, AutoTokenizer

    path = local_path(config.model)
    source = str(path) if path is not None else config.model
    options = {"revision": config.revision, "trust_remote_code": config.trust_remote_code}
    try:
        model_config = AutoConfig.from_pretrained(source, **options)
        problem = classifier_problem(model_config.architectures, model_config.num_labels)
        if problem is not None:
            raise ValueError(f"{KEY}.model = {config.model!r}: {problem}")
        tokenizer = AutoTokenizer.from_pretrained(source, **options)
        model = AutoModelForSequenceClassification.from_pretrained(source, dtype=dtype, **options)
    except OSError as exc:  # missing files, no hub access
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ValueError(f"{KEY}.model = {config.model!r}: cannot load it: {first}") from None
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token if tokenizer.eos_token is not None else tokenizer.unk_token
    if model.config.pad_token_id is None:  # batches > 1 find each text's last token by it
        model.config.pad_token_id = tokenizer.pad_token_id
    model.to(device).eval().requires_grad_(False)
    return tokenizer, model
