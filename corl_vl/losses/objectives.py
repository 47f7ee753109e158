"""The GRPO variants by name: how a group's rewards become advantages, how per-token losses become one loss, and
which KL estimator the β term uses.

Why a table (and a module without a torch import): ``grpo.advantage``, ``grpo.loss_type`` and
``grpo.kl_estimator`` are validated
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


def _k1(logprobs: Tensor, ref_logprobs: Tensor) -> Tensor:
    """k1: ``logp − ref`` (unbiased for KL(π‖π_ref), can be negative per token)."""
    return logprobs - ref_logprobs


def _k2(logprobs: Tensor, ref_logprobs: Tensor) -> Tensor:
    """k2: ``½ (logp − ref)²`` (≥ 0; its gradient is the KL's in expectation, the value is biased)."""
    return 0.5 * (logprobs - ref_logprobs) ** 2


def _k3(logprobs: Tensor, ref_logprobs: Tensor) -> Tensor:
    """k3: ``exp(ref − logp) − (ref − logp) − 1`` (≥ 0, unbiased; GRPO's and corl-vl's default)."""
    delta = ref_logprobs - logprobs
    return delta.exp() - delta - 1.0


# Schulman's estimators of KL(π‖π_ref) per token (``grpo.kl_estimator``): (logp, ref logp) → [B, T]
KL_ESTIMATORS: dict[str, Callable[[Tensor, Tensor], Tensor]] = {"k1": _k1, "k2": _k2, "k3": _k3}
KL_PLACEMENTS = ("loss", "reward")  # β·KL added to each token's loss, or subtracted from the reward (summed)
