"""Entropy of the next-token distribution over full ``[R, L, V]`` logits: the reference the
learner's chunked, completion-only entropy (``policy/entropy``, in
``grpo_run.core.learner.logprobs``) is tested against."""

from __future__ import annotations

import torch


@torch.no_grad()
def token_entropy(logits: torch.Tensor, *, temperature: float = 1.0) -> torch.Tensor:
    """Entropy of the next-token distribution that predicts each token, aligned like log-probs.

    ``logits``: ``[R, L, V]``; returns float32 ``[R, L]`` with ``out[:, t]`` the entropy of
    ``softmax(logits[:, t-1] / temperature)`` and ``out[:, 0] = 0``. One row at a time and
    without grad, so at most one ``[L, V]`` temporary exists besides the logits.
    """
    num_rows, length = logits.shape[:2]
    if length < 2 or num_rows == 0:
        return torch.zeros((num_rows, length), dtype=torch.float32, device=logits.device)
    rows = []
    for r in range(num_rows):
        row = logits[r, :-1].detach().float() / temperature  # [L-1, V]
        log_z = torch.logsumexp(row, dim=-1)  # [L-1]
        # H = log Z - sum_v p_v * z_v, with p = softmax(z).
        rows.append(log_z - (torch.softmax(row, dim=-1) * row).sum(-1))
    return torch.nn.functional.pad(torch.stack(rows), (1, 0))
