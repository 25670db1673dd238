"""The learner side of a sweep: the base model loaded once, one peft adapter per variant on it,
and per variant a :class:`~grpo_run.core.learner.learner.Learner` of its own (optimizer, LR
schedule, loss, KL, step count) over its adapter's parameters.

peft's active adapter is state of the shared model, so the variants' learner calls take turns:
each holds the base's lock and makes its adapter the active one (which also makes only its
parameters trainable) before it runs, and a training step leaves no gradient behind, so the next
variant's clipping sees its own gradients alone. The reference policy of a variant with a KL
term is the base model itself, its adapters switched off, as in a run.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from grpo_run.core.compat import enable_activation_checkpointing
from grpo_run.core.learner.learner import Learner
from grpo_run.core.learner.lora import AdapterDisabledView, add_adapter, merged_model_writer, save_adapter, wrap_policy
from grpo_run.core.learner.spec import LearnerSpec
from grpo_run.core.placement.learner_group import InProcessLearner
from grpo_run.core.plugins.adapters import LoraAdapter
from grpo_run.core.rollout.packing import SequenceToPack


class SharedBase:
    """One base model (loaded by the first variant's learner) carrying every variant's adapter."""

    def __init__(self) -> None:
        self.policy: Any = None
        """The ``peft.PeftModel`` once the first variant's learner was built."""
        self.lock = threading.RLock()

    def learner(self, name: str, spec: LearnerSpec) -> VariantLearner:
        """Variant ``name``'s learner: its adapter (new from ``spec``'s LoRA config and seed, or
        the checkpoint's at ``spec.model.policy_from``) on the shared base model."""
        model = spec.model
        assert model.lora is not None, "a sweep's variants train LoRA adapters (configs.sweep_issues)"
        with self.lock:
            if self.policy is None:
                base = model.load()
                if model.gradient_checkpointing:
                    enable_activation_checkpointing(base)
                self.policy = wrap_policy(base, model.lora, model.policy_from, seed=model.seed, name=name)
            else:
                add_adapter(self.policy, name, model.lora, model.policy_from, seed=model.seed)
            self.policy.set_adapter(name)  # its parameters, and only those, trainable: what its optimizer takes
            reference = AdapterDisabledView(self.policy) if spec.uses_reference else None
            kl = spec.kl_estimator.build() if spec.kl_estimator is not None else None
            learner = Learner(spec, self.policy, reference, spec.loss.build(), kl, adapter=name)
        return VariantLearner(learner, name, self)

    @contextlib.contextmanager
    def turn(self, name: str) -> Iterator[None]:
        """Hold the base with adapter ``name`` active."""
        with self.lock:
            if self.policy.active_adapter != name:
                self.policy.set_adapter(name)
            yield

    def close(self) -> None:
        self.policy = None


class VariantLearner(InProcessLearner):
    """A sweep variant's learner (the loop's and the checkpointer's :class:`LearnerGroup`): every
    call takes its turn on the shared base with its adapter active; its checkpoints hold its
    adapter alone, as a run's do."""

    def __init__(self, learner: Learner, name: str, base: SharedBase) -> None:
        super().__init__(learner)
        self.name = name
        self.base = base

    def train_step(self, seqs: Sequence[SequenceToPack]) -> dict[str, float]:
        with self.base.turn(self.name):
            try:
                return self.learner.train_step(seqs)
            finally:
                self.learner.optimizer.zero_grad(set_to_none=True)  # the next variant clips its own gradients

    def skip_step(self) -> None:
        with self.base.turn(self.name):
            self.learner.skip_step()

    def weights_snapshot(self) -> Mapping[str, Any] | LoraAdapter:
        with self.base.turn(self.name):
            return self.learner.weights_snapshot()

    def state_dict(self) -> dict[str, Any]:
        with self.base.turn(self.name):
            return self.learner.state_dict()

    def load_state_dict(self, state: Mapping[str, Any], checkpoint: Path) -> None:
        with self.base.turn(self.name):
            self.learner.load_state_dict(state)

    def save_pretrained(self, directory: str | Path, safe_serialization: bool = True) -> None:
        with self.base.turn(self.name):
            save_adapter(self.learner.policy, self.name, Path(directory))

    def extra_writer(self) -> Callable[[Path], None] | None:
        write = merged_model_writer(self.learner)
        if write is None:
            return None

        def locked(checkpoint: Path) -> None:
            with self.base.turn(self.name):
                write(checkpoint)
        return locked
