"""LoRA through peft: merged weights under the base model's names, the adapter-disabled reference,
only adapters training, and building a LoRA learner from a spec."""

from __future__ import annotations

import copy

import attrs
import pytest
import torch

from support.learner import make_seqs, make_spec, tiny_model

from grpo_run.core.config.schema import KLSlot, LoraSection
from grpo_run.core.errors import UserError
from grpo_run.core.learner.learner import Learner
from grpo_run.core.learner.lora import AdapterDisabledView, merged_state_dict, wrap_policy
from grpo_run.core.learner.learner import build_learner
from grpo_run.core.learner.spec import ComponentSpec, ModelSpec
from grpo_run.plugins.kl.k3 import K3KL
from grpo_run.plugins.losses.dapo import DapoLoss

peft = pytest.importorskip("peft", reason="LoRA needs the peft extra (pip install 'grpo-run[peft]')")


def trained_adapter(section: LoraSection, seed: int = 0) -> torch.nn.Module:
    """A float64 tiny Llama with adapters whose B (and saved modules) are not zero any more."""
    policy = wrap_policy(tiny_model(seed).double(), section)
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, param in policy.named_parameters():
            if param.requires_grad:
                param.add_(0.1 * torch.randn(param.shape, generator=gen, dtype=param.dtype))
    return policy


@pytest.mark.parametrize(
    "section",
    [
        LoraSection(r=4, alpha=8),
        LoraSection(r=2, alpha=3, use_rslora=True, target_modules=("q_proj", "v_proj")),
        LoraSection(r=4, alpha=8, use_dora=True),
        LoraSection(r=4, alpha=8, modules_to_save=("lm_head",)),
    ],
    ids=["lora", "rslora-qv", "dora", "modules-to-save"],
)
def test_merged_state_dict_equals_peft_merge_and_unload(section: LoraSection) -> None:
    policy = trained_adapter(section)
    before = {k: v.clone() for k, v in policy.state_dict().items()}
    merged = merged_state_dict(policy)
    reference = copy.deepcopy(policy).merge_and_unload().state_dict()
    base_names = set(tiny_model().state_dict())
    assert set(merged) == set(reference) == base_names
    for key in reference:
        torch.testing.assert_close(merged[key], reference[key], rtol=0, atol=1e-12)
    # The policy itself is untouched (no merge/unmerge round trip drifting the base weights).
    after = policy.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
    # An engine holding the base model takes the merged weights strictly and computes the policy.
    engine_model = tiny_model(5).double()
    engine_model.load_state_dict(merged, strict=True)
    ids = torch.tensor([[3, 7, 11, 4, 9]])
    with torch.no_grad():
        torch.testing.assert_close(engine_model(input_ids=ids).logits, policy(input_ids=ids).logits, rtol=0, atol=1e-10)


def test_adapter_disabled_view_is_the_base_model() -> None:
    policy = trained_adapter(LoraSection(r=4, alpha=8, modules_to_save=("lm_head",)))
    base = tiny_model().double()
    ids = torch.tensor([[3, 7, 11, 4, 9], [5, 5, 6, 2, 8]])
    view = AdapterDisabledView(policy)
    with torch.no_grad():
        assert torch.equal(view(input_ids=ids).logits, base(input_ids=ids).logits)
        assert not torch.allclose(policy(input_ids=ids).logits, base(input_ids=ids).logits)
    assert view.dtype == torch.float64 and next(view.parameters()) is next(policy.parameters())


def lora_learner(beta: float = 0.0) -> Learner:
    spec = make_spec(kl=KLSlot(beta=beta))
    spec = attrs.evolve(spec, model=attrs.evolve(spec.model, lora=LoraSection(r=4, alpha=8)))
    policy = wrap_policy(tiny_model(), spec.model.lora)
    reference = AdapterDisabledView(policy) if beta > 0 else None
    kl = K3KL(K3KL.Config()) if beta > 0 else None
    return Learner(spec, policy, reference, DapoLoss(DapoLoss.Config()), kl)


def test_only_adapters_train_and_the_snapshot_has_base_names() -> None:
    learner = lora_learner(beta=0.1)
    frozen = {n: p.detach().clone() for n, p in learner.policy.named_parameters() if not p.requires_grad}
    adapters = {n: p.detach().clone() for n, p in learner.policy.named_parameters() if p.requires_grad}
    assert adapters and all("lora_" in n for n in adapters)
    assert {id(p) for g in learner.optimizer.param_groups for p in g["params"]} == {
        id(p) for p in learner.policy.parameters() if p.requires_grad
    }
    metrics = learner.train_step(make_seqs(8))
    assert metrics["loss/kl"] == pytest.approx(0.0, abs=1e-7)  # adapters start at B = 0: policy == base
    learner.train_step(make_seqs(8, seed=1))
    params = dict(learner.policy.named_parameters())
    assert all(torch.equal(params[n], v) for n, v in frozen.items())
    assert any(not torch.equal(params[n], v) for n, v in adapters.items())
    snapshot = learner.weights_snapshot()
    assert set(snapshot) == set(tiny_model().state_dict())
    changed = [k for k, v in snapshot.items() if not torch.equal(v, tiny_model().state_dict()[k])]
    assert changed and all(k.endswith("proj.weight") for k in changed)


def test_build_learner_wraps_the_base_model_once(tiny_model_dir) -> None:
    spec = make_spec(kl=KLSlot(beta=0.05))
    model = ModelSpec(path=str(tiny_model_dir), lora=LoraSection(r=2, alpha=4, target_modules=("q_proj",)))
    spec = attrs.evolve(spec, model=model, kl_estimator=ComponentSpec(K3KL, K3KL.Config()))
    learner = build_learner(spec)
    assert isinstance(learner.policy, peft.PeftModel)
    assert isinstance(learner.reference, AdapterDisabledView) and learner.reference.policy is learner.policy
    trainable = [n for n, p in learner.policy.named_parameters() if p.requires_grad]
    assert trainable and all("q_proj.lora_" in n for n in trainable)


def test_unknown_target_module_is_a_user_error(tiny_model_dir) -> None:
    spec = make_spec()
    spec = attrs.evolve(spec, model=ModelSpec(path=str(tiny_model_dir), lora=LoraSection(target_modules=("qkv_fused",))))
    with pytest.raises(UserError, match=r"^model\.lora: .*qkv_fused"):
        build_learner(spec)


def test_lora_with_several_learner_ranks_is_a_config_error(plugin_host) -> None:
    from grpo_run.core.config import ConfigError, parse_config

    data = {"task": {"name": "arithmetic"}, "verifiers": {"math": {}}, "model": {"lora": {"r": 4}},
            "learner": {"num_learners": 2}}
    with pytest.raises(ConfigError) as err:
        parse_config(data, plugin_host.registry, "run.toml")
    assert [(i.path, i.message.split(",")[0]) for i in err.value.issues] == [
        ("learner.num_learners", "is 2")
    ]
