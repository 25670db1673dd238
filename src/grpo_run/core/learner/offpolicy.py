"""Off-policy pieces of the learner: engine/trainer mismatch correction, the KL penalty in the
reward, and the Polyak-averaged reference policy.

**Mismatch correction** (truncated importance sampling, Yao et al. 2025, "Your Efficient RL
Framework Secretly Brings You Off-Policy RL Training", https://fengyao.notion.site/off-policy-rl;
masking as in verl's rollout correction). The engine samples with ``pi_engine`` while the loss
treats the learner's recomputed ``pi_old`` as the behaviour policy; numerics (kernels, dtypes,
batch shapes) make them differ. Per loss token ``rho_t = pi_old(t) / pi_engine(t)``:

* ``token-truncate``: weight ``min(rho_t, upper)``;
* ``token-mask``: weight 1 if ``lower <= rho_t <= upper`` else 0;
* ``sequence-truncate`` / ``sequence-mask``: the same on the sequence ratio
  ``rho_s = prod_t rho_t = exp(sum_t log rho_t)``, applied to every token of the sequence.

The sequence ratio is the **product** (the true likelihood ratio of the whole completion, as in
verl's ``"sequence"`` level), not the geometric mean: an importance weight must be the ratio of
the probabilities of what was sampled. Its log is clamped to ``[-20, 20]`` before ``exp``. The
product drifts with length, so for long completions prefer the token modes or a wide mask range.
The weight is detached and multiplies the policy loss only (not the KL term); masked tokens stay
in the loss normaliser (they shrink the step, they do not reweight the rest).
"""

from __future__ import annotations

from typing import Literal

import torch

MismatchMode = Literal["none", "token-truncate", "token-mask", "sequence-truncate", "sequence-mask"]
LOG_RATIO_BOUND = 20.0
"""Sequence log-ratios are clamped to +-this before ``exp`` (``exp(20) ~ 4.9e8``)."""


def sequence_sums(values: torch.Tensor, mask: torch.Tensor, seq_ids: torch.Tensor, num_seqs: int) -> torch.Tensor:
    """Sum of ``values`` (``[R, L]``) over each sequence's ``mask`` tokens: ``[num_seqs]``."""
    if num_seqs == 0:
        return values.new_zeros(0)
    flat_ids = torch.where(mask, seq_ids, torch.zeros_like(seq_ids)).reshape(-1)
    masked = torch.where(mask, values, torch.zeros_like(values)).reshape(-1)
    return values.new_zeros(num_seqs).index_add(0, flat_ids, masked)


def broadcast_to_tokens(per_seq: torch.Tensor, mask: torch.Tensor, seq_ids: torch.Tensor) -> torch.Tensor:
    """``per_seq[seq_ids]`` on ``mask`` tokens, 0 elsewhere: ``[R, L]``."""
    if per_seq.numel() == 0:
        return torch.zeros(mask.shape, dtype=per_seq.dtype, device=mask.device)
    values = per_seq[torch.where(mask, seq_ids, torch.zeros_like(seq_ids))]
    return torch.where(mask, values, torch.zeros_like(values))


def sampled_engine_logprobs(engine_logprobs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``engine_logprobs`` where ``mask``, 0 elsewhere; a NaN on a loss token -- a token the engine
    did not sample, such as an environment message -- raises instead of reaching a ratio."""
    on_loss = engine_logprobs[mask]
    if bool(torch.isnan(on_loss).any()):
        raise RuntimeError(
            f"{int(torch.isnan(on_loss).sum())} loss tokens have no engine log-prob (environment tokens "
            "trained with environment.train_on_env_tokens): they cannot be used as old log-probs or "
            "for the mismatch correction"
        )
    return torch.where(mask, engine_logprobs, torch.zeros_like(engine_logprobs))


def mismatch_weights(
    old_logprobs: torch.Tensor,
    engine_logprobs: torch.Tensor,
    mask: torch.Tensor,
    seq_ids: torch.Tensor,
    num_seqs: int,
    mode: MismatchMode,
    upper: float,
    lower: float = 0.0,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Detached per-token weights ``[R, L]`` (0 off ``mask``) and ``mismatch/*`` metrics.

    ``old_logprobs``, ``engine_logprobs``: ``[R, L]`` log-probs of the sampled tokens under the
    learner's pi_old and the engine. Metrics, over loss tokens: ``kept_frac`` (weight > 0),
    ``capped_frac`` (truncate modes: ratio above ``upper``), ``weight_mean``, ``rho_mean`` (the
    raw token ratio) and ``log_rho_abs_mean``.
    """
    with torch.no_grad():
        diff = old_logprobs.float() - engine_logprobs.float()
        log_rho = torch.where(mask, diff, torch.zeros_like(diff))
        if mode.startswith("sequence-"):
            seq_log_rho = sequence_sums(log_rho, mask, seq_ids, num_seqs).clamp(-LOG_RATIO_BOUND, LOG_RATIO_BOUND)
            rho = broadcast_to_tokens(seq_log_rho.exp(), mask, seq_ids)
        elif mode.startswith("token-"):
            rho = torch.where(mask, log_rho.clamp(-LOG_RATIO_BOUND, LOG_RATIO_BOUND).exp(), torch.zeros_like(log_rho))
        else:
            raise ValueError(f"unknown mismatch correction {mode!r}")
        if mode.endswith("-truncate"):
            weights = rho.clamp(max=upper)
            capped = mask & (rho > upper)
        else:
            weights = ((rho >= lower) & (rho <= upper)).to(rho.dtype)
            capped = torch.zeros_like(mask)
        weights = torch.where(mask, weights, torch.zeros_like(weights))
        n = max(int(mask.sum()), 1)
        token_rho = torch.where(mask, log_rho.exp(), torch.zeros_like(log_rho))
        metrics = {
            "mismatch/kept_frac": float((mask & (weights > 0)).sum()) / n,
            "mismatch/capped_frac": float(capped.sum()) / n,
            "mismatch/weight_mean": float(weights.sum()) / n,
            "mismatch/rho_mean": float(token_rho.sum()) / n,
            "mismatch/log_rho_abs_mean": float(log_rho.abs().sum()) / n,
        }
    return weights, metrics


def kl_reward_advantages(
    advantages: torch.Tensor,
    kl_per_token: torch.Tensor,
    beta: float,
    mask: torch.Tensor,
    seq_ids: torch.Tensor,
    num_seqs: int,
) -> tuple[torch.Tensor, dict[str, float]]:
    """``kl.placement = "reward"``: ``A_s - beta * sum_t KL_t(s)`` on every loss token of sequence s.

    The KL estimate (``[R, L]``, from pi_old and the reference) is detached and summed over the
    sequence's loss tokens: the KL of the whole completion, a penalty on the sequence's reward.
    It is subtracted from the already group-normalised advantage (the learner does not know the
    groups), so it is not renormalised; ``beta`` is in advantage units.
    """
    with torch.no_grad():
        seq_kl = sequence_sums(kl_per_token.detach().float(), mask, seq_ids, num_seqs)  # [num_seqs]
        penalty = beta * broadcast_to_tokens(seq_kl, mask, seq_ids)
        has_tokens = sequence_sums(mask.float(), mask, seq_ids, num_seqs) > 0
        n = max(int(has_tokens.sum()), 1)
        metrics = {
            "kl/sequence_mean": float(seq_kl[has_tokens].sum()) / n,
            "kl/reward_penalty_mean": beta * float(seq_kl[has_tokens].sum()) / n,
        }
    return torch.where(mask, advantages - penalty.to(advantages.dtype), torch.zeros_like(advantages)), metrics


@torch.no_grad()
def polyak_update(reference: torch.nn.Module, policy: torch.nn.Module, alpha: float) -> None:
    """``theta_ref <- alpha * theta + (1 - alpha) * theta_ref`` for every parameter, in place."""
    ref_params = list(reference.parameters())
    policy_params = list(policy.parameters())
    if len(ref_params) != len(policy_params):
        raise ValueError(f"reference has {len(ref_params)} parameters, policy {len(policy_params)}")
    for ref, param in zip(ref_params, policy_params):
        ref.mul_(1.0 - alpha).add_(param.detach().to(ref.dtype), alpha=alpha)
