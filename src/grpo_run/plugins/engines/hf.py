"""Generation with Hugging Face transformers ``generate`` (CPU or one GPU)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Mapping, Sequence

import attrs
import torch
from transformers import AutoModelForCausalLM

from grpo_run import Completion, EngineContext, SamplingParams


@attrs.frozen
class HFEngineConfig:
    """Options of the ``hf`` engine."""

    max_batch_size: int = attrs.field(default=256, validator=attrs.validators.gt(0))
    """Sequences per ``generate`` call; larger requests are split."""


class HFEngine:
    """Samples with ``model.generate`` on its own copy of the weights.

    Generation runs in a worker thread so the event loop (scoring, learner) keeps going; one
    generate call runs at a time, and weight updates wait for it to finish.
    """

    name = "hf"
    Config = HFEngineConfig

    def __init__(self, config: HFEngineConfig, context: EngineContext) -> None:
        self.config = config
        self.tokenizer = context.tokenizer
        self.device = torch.device(context.device)
        self.model = AutoModelForCausalLM.from_pretrained(
            context.model_path, dtype=context.dtype, attn_implementation=context.attn_implementation
        ).to(self.device)
        self.model.eval()
        self.model.requires_grad_(False)
        self.version = 0
        self._lock = threading.Lock()  # generate vs weight update, across threads
        self._seed = context.seed
        self._calls = 0
        self.eos_token_id = self.tokenizer.eos_token_id
        self.pad_token_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.eos_token_id

    async def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[list[Completion]]:
        return await asyncio.to_thread(self.generate_sync, prompts, params)

    async def generate_stream(
        self, prompts: Sequence[Sequence[int]], params: SamplingParams
    ) -> AsyncIterator[tuple[int, list[Completion]]]:
        """Yield ``(prompt_index, completions)`` per generate call of at most ``max_batch_size``
        sequences, so the caller can score early groups while later ones generate."""
        per_call = max(1, self.config.max_batch_size // params.n)
        for start in range(0, len(prompts), per_call):
            chunk = prompts[start : start + per_call]
            groups = await asyncio.to_thread(self.generate_sync, chunk, params)
            for offset, group in enumerate(groups):
                yield start + offset, group

    async def update_weights(self, state_dict: Mapping[str, torch.Tensor], version: int) -> None:
        await asyncio.to_thread(self._load, state_dict, version)

    def state_dict(self) -> dict[str, int]:
        """The sampling-seed counter, so a resumed run draws the same completions."""
        return {"calls": self._calls}

    def load_state_dict(self, state: Mapping[str, int]) -> None:
        self._calls = int(state["calls"])

    def close(self) -> None:
        self.model = None  # type: ignore[assignment]

    # -- implementation -------------------------------------------------------------------

    def _load(self, state_dict: Mapping[str, torch.Tensor], version: int) -> None:
        with self._lock:
            self.model.load_state_dict(state_dict, strict=True)
            self.version = version

    def generate_sync(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[list[Completion]]:
        """Blocking generation; returns ``params.n`` completions per prompt."""
        flat = [list(p) for p in prompts for _ in range(params.n)]
        out: list[Completion] = []
        with self._lock, torch.inference_mode():
            self._calls += 1
            seed = params.seed if params.seed is not None else self._seed * 1_000_003 + self._calls
            generator_state = torch.random.get_rng_state()
            torch.manual_seed(seed)
            try:
                for start in range(0, len(flat), self.config.max_batch_size):
                    out.extend(self._generate_chunk(flat[start : start + self.config.max_batch_size], params))
            finally:
                torch.random.set_rng_state(generator_state)
        return [out[i * params.n : (i + 1) * params.n] for i in range(len(prompts))]

    def _generate_chunk(self, prompts: list[list[int]], params: SamplingParams) -> list[Completion]:
        width = max(len(p) for p in prompts)
        input_ids = torch.full((len(prompts), width), self.pad_token_id, dtype=torch.long)
        attention = torch.zeros((len(prompts), width), dtype=torch.long)
        for i, p in enumerate(prompts):  # left padding: every prompt ends at the same column
            input_ids[i, width - len(p) :] = torch.tensor(p)
            attention[i, width - len(p) :] = 1
        kwargs = dict(
            max_new_tokens=params.max_new_tokens,
            eos_token_id=self.eos_token_id,
            pad_token_id=self.pad_token_id,
            return_dict_in_generate=True,
            output_logits=True,
        )
        if params.greedy:
            kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
        else:
            kwargs.update(do_sample=True, temperature=params.temperature, top_p=params.top_p, top_k=0)
        if params.stop_strings:
            kwargs.update(stop_strings=list(params.stop_strings), tokenizer=self.tokenizer)
        result = self.model.generate(
            input_ids=input_ids.to(self.device), attention_mask=attention.to(self.device), **kwargs
        )
        new_tokens = result.sequences[:, width:].cpu()
        # Engine log-probs of the sampled tokens under the sampling temperature (no top-p
        # renormalisation, matching what the learner recomputes).
        logits = torch.stack(result.logits, dim=1).float().cpu()  # [B, T, V]
        temperature = 1.0 if params.greedy else params.temperature
        logprobs = torch.log_softmax(logits / temperature, dim=-1)
        token_logprobs = logprobs.gather(-1, new_tokens[:, : logits.shape[1]].unsqueeze(-1)).squeeze(-1)
        return [self._to_completion(new_tokens[i], token_logprobs[i], params) for i in range(len(prompts))]

    def _to_completion(self, tokens: torch.Tensor, logprobs: torch.Tensor, params: SamplingParams) -> Completion:
        ids = tokens.tolist()
        finish = "length"
        end = len(ids)
        if self.eos_token_id in ids:
            end = ids.index(self.eos_token_id) + 1
            finish = "stop"
        ids = ids[:end]
        text = self.tokenizer.decode(ids, skip_special_tokens=True)
        if finish == "length" and params.stop_strings:
            # generate() stops a row at a stop string and pads the rest; find where it ended.
            for cut in range(1, len(ids) + 1):
                piece = self.tokenizer.decode(ids[:cut], skip_special_tokens=True)
                if any(piece.endswith(s) for s in params.stop_strings):
                    ids, text, finish = ids[:cut], piece, "stop"
                    break
        return Completion(
            token_ids=tuple(ids),
            logprobs=tuple(logprobs[: len(ids)].tolist()),
            text=text,
            finish_reason=finish,
            policy_version=self.version,
        )
