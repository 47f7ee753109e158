"""The GRPO variants by name: how a group's rewards become advantages, and how per-token losses become one loss.

Why a table (and a module without a torch import): ``grpo.advantage`` and ``grpo.loss_type`` are validated
against these names when a config is read — before torch is imported — and :mod:`corl_vl.train.grpo` calls the
entries, so a new variant is one function and one table row here. The functions use tensor methods only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Tensor = Any  # torch.Tensor; not imported so that config validation stays light


def _std_scaled(centred: Tensor, rewards: Tensor, eps: float) -> Tensor:
    """GRPO: divide by the group's sample std (Bessel-corrected) plus ``eps``."""
    return centred / (rewards.std(dim=-1, keepdim=True) + eps)


def _centred(centred: Tensor, rewards: Tensor, eps: float) -> Tensor:
    """Dr. GRPO: no std (it up-weights near-unanimous groups)."""
    return centred


# name → (centred rewards [G, K], rewards [G, K], eps) → advantages [G, K]
GROUP_NORMALISED = ("grpo", "dr_grpo")  # advantages centred on the group mean: need k ≥ 2 completions
ADVANTAGES: dict[str, Callable[[Tensor, Tensor, float], Tensor]] = {"grpo": _std_scaled, "dr_grpo": _centred}


def _token_mean(masked: Tensor, mask: Tensor, n_sequences: int, n_tokens: int, max_len: int) -> Tensor:
    """BNPO / DAPO: ``Σ ℓ·m / Σ m`` over the whole batch."""
    return masked.sum() / max(n_tokens, 1)


def _sequence_mean(masked: Tensor, mask: Tensor, n_sequences: int, n_tokens: int, max_len: int) -> Tensor:
    """GRPO: the mean over sequences of each sequence's token mean."""
    return (masked.sum(-1) / mask.sum(-1).clamp(min=1.0)).sum() / max(n_sequences, 1)


def _constant_length(masked: Tensor, mask: Tensor, n_sequences: int, n_tokens: int, max_len: int) -> Tensor:
    """Dr. GRPO: ``Σ ℓ·m / (B · max_len)`` with a constant length (no length bias)."""
    return masked.sum() / (max(n_sequences, 1) * max_len)


# name → (masked per-token losses [B, T], mask [B, T], batch sequences, batch tokens, max_len) → scalar loss
LOSS_TYPES: dict[str, Callable[[Tensor, Tensor, int, int, int], Tensor]] = {
    "bnpo": _token_mean,
    "grpo": _sequence_mean,
    "dr_grpo": _constant_length,
}
