"""Generation with a Hugging Face transformers model (CPU or one GPU).

Each distinct prompt of a call is computed once and its KV cache repeated to its samples; the
decode steps write into buffers reserved for the call (:mod:`.hf_decode`, which says why this is
not transformers' ``generate``, and what it keeps of it). Intra-op threads are set per call
(``num_threads``), so generation in its worker thread and the learner in another do not both
claim every core. A sweep's variants each have an adapter on this one copy of the model, and
their requests share sampling calls (:mod:`.hf_batches`: ``generate_batch``)."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from grpo_run import AdapterSlots, Completion, EngineContext, LoraAdapter, MemoryPart, MemoryRequest, SamplingParams
from grpo_run.plugins.engines.hf_adapters import PeftAdapters
from grpo_run.plugins.engines.hf_batches import Segment, decode_settings, pack, request_segments
from grpo_run.plugins.engines.hf_batches import sample_chunks as sample_chunks  # re-exported: its tests import it here
from grpo_run.plugins.engines.hf_decode import RowDraws, sample

if TYPE_CHECKING:  # functions import torch when they run: `grpo-run check` loads this module without it
    import torch


@attrs.frozen
class HFEngineConfig:
    """Options of the ``hf`` engine."""

    max_batch_size: int = attrs.field(default=256, validator=attrs.validators.gt(0))
    """Sequences per sampling call (one batch through the model); larger requests are split."""
    device: str = attrs.field(default="auto", validator=attrs.validators.matches_re(r"auto|cpu|cuda(:\d+)?"))
    """Where the engine's copy of the model runs: ``"auto"`` (the model's device), ``"cpu"`` or a
    GPU such as ``"cuda:7"`` (one the learner ranks do not use, so generation's KV cache does not
    sit beside learner rank 0; ``grpo-run plan`` suggests it where that makes a run fit)."""
    num_threads: int = attrs.field(default=0, validator=attrs.validators.ge(0))
    """torch intra-op threads while generating; 0 = the process's threads when generation runs
    alone (``rollout.async_steps = 1``), half of them (at least 1) when learner steps run beside it,
    so the learner keeps the other half. Measured on 2 cores (bench-small, ``bench/bench_step.py``):
    2 threads alone 1.03 s/step vs 1.08 with 1; beside the learner 1 thread 0.81 vs 0.85 with 2."""


class HFEngine:
    """Samples from a transformers model on its own copy of the weights: each distinct prompt of a
    call computed once, decode steps on KV buffers reserved for the call.

    The sampling loop is :mod:`.hf_decode`. Generation runs in a worker thread so the event loop
    (scoring, learner) keeps going; one sampling call runs at a time, and weight updates wait for
    it to finish. A LoRA run's adapter goes into peft's layers on this copy (:mod:`.hf_adapters`);
    a sweep's variants have one adapter each, with a version each, and ``generate_batch`` samples
    their requests together, one forward serving every adapter (peft's ``adapter_names``).
    """

    name = "hf"
    Config = HFEngineConfig

    def __init__(self, config: HFEngineConfig, context: EngineContext) -> None:
        import torch
        from transformers import AutoModelForCausalLM

        self.config = config
        self.tokenizer = context.tokenizer
        self.device = torch.device(context.device if config.device == "auto" else config.device)
        self.model = AutoModelForCausalLM.from_pretrained(
            context.model_path, dtype=context.dtype, attn_implementation=context.attn_implementation
        ).to(self.device)
        self.model.eval()
        self.model.requires_grad_(False)
        self.version = 0
        self.versions: dict[str, int] = {}
        """Each adapter's policy version (a sweep's variants sync theirs in turn)."""
        self._lock = threading.Lock()  # sampling vs weight update, across threads
        self._seed = context.seed
        self._calls = 0
        self.eos_token_id = self.tokenizer.eos_token_id
        shared = max(1, torch.get_num_threads() // 2) if context.overlaps_learner else torch.get_num_threads()
        self.num_threads = config.num_threads or shared
        self.pad_token_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.eos_token_id
        self.adapters = PeftAdapters(self.model) if context.adapters is not None else None

    @classmethod
    def memory_parts(cls, config: HFEngineConfig, request: MemoryRequest) -> list[MemoryPart]:
        """Its copy of the weights in ``model.dtype``, and while generating one sampling call
        (``max_batch_size`` sequences at most): the KV buffers it reserves for the call's whole
        length, and one decode step's logits with their float32 softmax and float64 cumulative sum
        (the engine log-probs are taken per step, so no step's logits outlive it)."""
        batch = min(config.max_batch_size, -(-request.sequences // max(1, request.engines)))
        tokens = request.prompt_tokens + request.response_tokens
        kv = batch * tokens * request.layers * 2 * request.kv_dim * request.param_bytes
        step = batch * request.vocab * (4 + 4 + 8)
        device = "" if config.device == "auto" else ("cuda:0" if config.device == "cuda" else config.device)
        parts = [MemoryPart("weights", request.params * request.param_bytes, "a copy of the policy", device=device)]
        if request.adapter_params:
            parts.append(MemoryPart("LoRA adapter", request.adapter_params * request.param_bytes,
                                    "the policy's adapter (a sweep's: every variant's) on its copy of the base",
                                    device=device))
        return parts + [
            MemoryPart("KV cache", kv, f"{batch} sequences x {tokens} tokens", transient=True, device=device),
            MemoryPart("decode step", step, f"{batch} sequences x {request.vocab} logits, probabilities, "
                       "cumulative sum", transient=True, device=device),
        ]

    async def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[list[Completion]]:
        return await asyncio.to_thread(self.generate_sync, prompts, params)

    async def generate_stream(
        self, prompts: Sequence[Sequence[int]], params: SamplingParams
    ) -> AsyncIterator[tuple[int, list[Completion]]]:
        """Yield ``(prompt_index, completions)`` per sampling call of at most ``max_batch_size``
        sequences, so the caller can score early groups while later ones generate."""
        per_call = max(1, self.config.max_batch_size // params.n)
        for start in range(0, len(prompts), per_call):
            chunk = prompts[start : start + per_call]
            groups = await asyncio.to_thread(self.generate_sync, chunk, params, start)
            for offset, group in enumerate(groups):
                yield start + offset, group

    async def update_weights(self, state_dict: Mapping[str, torch.Tensor], version: int) -> None:
        await asyncio.to_thread(self._load, state_dict, version)

    @classmethod
    def refuses_adapter(cls, config: HFEngineConfig, lora: Mapping[str, Any]) -> str | None:
        """None: peft serves every adapter the learner trains (DoRA and ``modules_to_save`` too)."""
        return None

    async def update_adapter(self, adapter: LoraAdapter, version: int) -> None:
        """Copy the adapter's tensors into the peft layers on this engine's model, in place."""
        await asyncio.to_thread(self._load_adapter, adapter, version)

    @classmethod
    def refuses_adapters(cls, config: HFEngineConfig, slots: AdapterSlots) -> str | None:
        """None: peft holds any number of adapters on one model."""
        return None

    async def generate_batch(
        self, requests: Sequence[tuple[Sequence[Sequence[int]], SamplingParams]]
    ) -> list[list[list[Completion]]]:
        """Several requests (each with its own ``n``, seed and adapter) in shared sampling calls:
        each gets what ``generate`` gives it alone, up to floating-point reordering."""
        return await asyncio.to_thread(self._generate_requests, requests)

    def state_dict(self) -> dict[str, int]:
        """The sampling-seed counter, so a resumed run draws the same completions."""
        return {"calls": self._calls}

    def load_state_dict(self, state: Mapping[str, int]) -> None:
        self._calls = int(state["calls"])

    def close(self) -> None:
        self.model = None  # type: ignore[assignment]
        self.adapters = None  # its peft wrapper holds the model too

    # -- implementation -------------------------------------------------------------------

    def _load(self, state_dict: Mapping[str, torch.Tensor], version: int) -> None:
        with self._lock:
            self.model.load_state_dict(state_dict, strict=True)
            self.version = version

    def _load_adapter(self, adapter: LoraAdapter, version: int) -> None:
        if self.adapters is None:
            raise RuntimeError("the hf engine was built for full weights (EngineContext.adapters is None)")
        with self._lock:
            self.adapters.load(adapter)
            self.version = self.versions[adapter.name] = version

    def generate_sync(
        self, prompts: Sequence[Sequence[int]], params: SamplingParams, first_prompt: int = 0
    ) -> list[list[Completion]]:
        """Blocking generation; returns ``params.n`` completions per prompt.

        With ``params.seed`` (what the training loop and evaluation pass) each sampling call
        is seeded from it and the index of its first prompt and sample (``prompts`` start at
        ``first_prompt`` of the request), so what is drawn depends on what is asked, not on how
        many calls came before. Without it, a per-engine call counter (the engine's state) seeds
        each call."""
        return self._generate_requests([(prompts, params)], first_prompt)[0]

    def _generate_requests(
        self, requests: Sequence[tuple[Sequence[Sequence[int]], SamplingParams]], first_prompt: int = 0
    ) -> list[list[list[Completion]]]:
        """Blocking generation of several requests (:mod:`.hf_batches` says how they share calls)."""
        import torch

        out: list[list[list[Completion]]] = [[[] for _ in prompts] for prompts, _ in requests]
        with self._lock, torch.inference_mode(), _intra_op_threads(self.num_threads):
            segments: dict[tuple, list[Segment]] = {}  # by sampling settings, in request order
            for r, (prompts, params) in enumerate(requests):
                self._calls += 1
                calls = self._calls
                made = request_segments(r, len(prompts), params, self.config.max_batch_size,
                                        lambda seed: self._generator(seed if seed is not None else
                                                                     self._seed * 1_000_003 + calls),
                                        self._adapter_for(params), first_prompt)
                segments.setdefault(decode_settings(params), []).extend(made)
            mixes = self.adapters.mixes if self.adapters is not None else (lambda names: len(names) == 1)
            for group in segments.values():
                for call in pack(group, self.config.max_batch_size, mixes):
                    comps = self._sample_call(call, requests)
                    for segment in call:
                        for i, k in segment.chunk:
                            out[segment.request][i].extend(comps[:k])
                            comps = comps[k:]
        return out

    def _generator(self, seed: int) -> torch.Generator:
        import torch

        return torch.Generator(device=self.device).manual_seed(seed)

    def _adapter_for(self, params: SamplingParams) -> str | None:
        """The loaded adapter a request samples with (``None``: the base model)."""
        if self.adapters is None:
            return None
        name = params.adapter if params.adapter is not None else self.adapters.active
        return name if self.adapters.has(name) else None

    def _version_of(self, params: SamplingParams) -> int:
        """The policy version of a request's completions: its adapter's (0 before it is loaded)."""
        return self.version if params.adapter is None else self.versions.get(params.adapter, 0)

    def _sample_call(self, call: Sequence[Segment], requests: Sequence[tuple[Sequence[Sequence[int]], SamplingParams]]
                     ) -> list[Completion]:
        """The samples of ``call``'s segments, in order, from one sampling loop.

        Identical prompts with the same adapter are prefilled once (the G episodes of a group open
        with the same prompt, each asked for as its own prompt with one sample; a sweep's variants
        before their first sync share the base model)."""
        import torch

        rows: dict[tuple[str | None, tuple[int, ...]], int] = {}
        owners: list[int] = []
        for segment in call:
            prompts = requests[segment.request][0]
            for i, k in segment.chunk:
                owners.extend([rows.setdefault((segment.adapter, tuple(prompts[i])), len(rows))] * k)
        prompts = [list(p) for _, p in rows]
        width = max(len(p) for p in prompts)
        input_ids = torch.full((len(prompts), width), self.pad_token_id, dtype=torch.long)
        attention = torch.zeros((len(prompts), width), dtype=torch.long)
        for i, p in enumerate(prompts):  # left padding: every prompt ends at the same column
            input_ids[i, width - len(p) :] = torch.tensor(p)
            attention[i, width - len(p) :] = 1
        input_ids, attention = input_ids.to(self.device), attention.to(self.device)
        expand = torch.tensor(owners, dtype=torch.long, device=self.device)
        params = requests[call[0].request][1]  # the call's sampling settings (equal for all its segments)
        model, names, context = (self.adapters.model_for([a for a, _ in rows]) if self.adapters is not None
                                 else (self.model, None, contextlib.nullcontext()))
        with context:
            new_tokens, token_logprobs = sample(
                model, input_ids, attention, expand, params,
                pad_token_id=self.pad_token_id, eos_token_id=self.eos_token_id, tokenizer=self.tokenizer,
                draws=RowDraws([(s.rows, s.generator) for s in call]), adapters=names,
            )
        new_tokens, token_logprobs = new_tokens.cpu(), token_logprobs.cpu()
        out, b = [], 0
        for segment in call:
            request_params = requests[segment.request][1]
            version = self._version_of(request_params)
            for _ in range(segment.rows):
                out.append(self._to_completion(new_tokens[b], token_logprobs[b], request_params, version))
                b += 1
        return out

    def _to_completion(self, tokens: torch.Tensor, logprobs: torch.Tensor, params: SamplingParams,
                       version: int) -> Completion:
        ids = tokens.tolist()
        finish = "length"
        end = len(ids)
        if self.eos_token_id in ids:
            end = ids.index(self.eos_token_id) + 1
            finish = "stop"
        ids = ids[:end]
        text = self.tokenizer.decode(ids, skip_special_tokens=True)
        if finish == "length" and params.stop_strings:
            # the sampling loop stops a row at a stop string and pads the rest; find where it ended.
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
            policy_version=version,
        )


@contextlib.contextmanager
def _intra_op_threads(count: int) -> Iterator[None]:
    """Use ``count`` intra-op threads in this thread for the duration (the setting is per thread
    for OpenMP and MKL; the process-wide default read by new threads is restored after)."""
    import torch
    previous = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(previous)
