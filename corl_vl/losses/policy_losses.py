"""The policy losses by name (``grpo.policy_loss``): how a token's ratio and advantage become its loss.

Why a table (and no torch import, as :mod:`corl_vl.losses.objectives`): ``grpo.policy_loss`` is validated against
these names when a config is read, and :func:`corl_vl.train.grpo.policy_loss` calls the entry, then applies the
rollout correction ``ρ``, the KL and entropy terms and the aggregation (``grpo.loss_type``) the same way for every
loss. A new loss is one function and one row here. The functions use tensor methods only.

Every function takes ``(logprobs, old_logprobs, adv, mask, spec)`` — ``[B, T]`` trainer logprobs (with grad),
the old ones (detached), ``adv`` of shape ``[B, 1]``, the ``[B, T]`` mask, and the
:class:`~corl_vl.train.grpo.LossSpec` — and returns ``(per_token_loss, clipped_low, clipped_high)``, three
``[B, T]`` tensors; the last two are 1 where the clip (or cap) acted, for the ``clip/*`` metrics. A
sequence-level loss (GSPO, GMPO) gives each of a sequence's tokens the sequence's loss, so ``loss_type: grpo``
(mean over sequences of each sequence's token mean) is exactly the paper's per-sequence mean.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Tensor = Any  # torch.Tensor; not imported so that config validation stays light


def _bounds(spec: Any) -> tuple[float, float]:
    """(ε_low, ε_high): ``grpo.epsilon`` and ``grpo.epsilon_high`` (unset → ε_low, symmetric)."""
    return spec.epsilon, spec.epsilon if spec.epsilon_high is None else spec.epsilon_high


def _clip_flags(value: Tensor, adv: Tensor, low: float, high: float) -> tuple[Tensor, Tensor]:
    """Where the clip of ``min(v·A, clip(v)·A)`` is active: below ``low`` with A < 0, above ``high`` with A > 0."""
    return ((value < low) & (adv < 0)).to(value.dtype), ((value > high) & (adv > 0)).to(value.dtype)


def ppo_clip(logprobs: Tensor, old: Tensor, adv: Tensor, mask: Tensor, spec: Any) -> tuple[Tensor, ...]:
    """PPO-clip per token (GRPO, DAPO's clip-higher with ``epsilon_high``): ``r = exp(logp − logp_old)``,
    ``ℓ = −min(r·A, clip(r, 1 − ε_low, 1 + ε_high)·A)``."""
    eps_low, eps_high = _bounds(spec)
    ratio = (logprobs - old).exp()
    clipped = ratio.clamp(1.0 - eps_low, 1.0 + eps_high)
    per_token = -(ratio * adv).minimum(clipped * adv)
    return (per_token, *_clip_flags(ratio, adv, 1.0 - eps_low, 1.0 + eps_high))


def _sequence_log_ratio(log_ratio: Tensor, mask: Tensor) -> Tensor:
    """``[B, 1]``: the mean of a sequence's token log-ratios over its real tokens (0 for an empty sequence)."""
    return (log_ratio * mask).sum(-1, keepdim=True) / mask.sum(-1, keepdim=True).clamp(min=1.0)


def gspo(logprobs: Tensor, old: Tensor, adv: Tensor, mask: Tensor, spec: Any) -> tuple[Tensor, ...]:
    """GSPO (Zheng et al. 2025): the sequence ratio ``s = exp(mean_t (logp − logp_old))`` (the geometric mean of
    the token ratios, length-normalised) in the PPO-clip surrogate, ``ℓ = −min(s·A, clip(s, 1 − ε_low,
    1 + ε_high)·A)``, the same for every token of the sequence. The paper's ranges are tiny (3e-4 / 4e-4)."""
    eps_low, eps_high = _bounds(spec)
    seq = _sequence_log_ratio(logprobs - old, mask).exp()
    clipped = seq.clamp(1.0 - eps_low, 1.0 + eps_high)
    per_seq = -(seq * adv).minimum(clipped * adv)
    low, high = _clip_flags(seq, adv, 1.0 - eps_low, 1.0 + eps_high)
    ones = mask.new_ones(mask.shape)
    return per_seq * ones, low * ones, high * ones


def cispo(logprobs: Tensor, old: Tensor, adv: Tensor, mask: Tensor, spec: Any) -> tuple[Tensor, ...]:
    """CISPO (MiniMax-M1, 2025): every token keeps its gradient, weighted by its ratio clipped from above and
    detached: ``ℓ = −sg(min(r, 1 + ε_high))·A·logp``. No lower bound (the paper sets ε_low out of reach)."""
    _, eps_high = _bounds(spec)
    ratio = (logprobs - old).exp()
    weight = ratio.clamp(max=1.0 + eps_high).detach()
    per_token = -weight * adv * logprobs
    return per_token, mask.new_zeros(mask.shape), (ratio > 1.0 + eps_high).to(ratio.dtype)


def sapo(logprobs: Tensor, old: Tensor, adv: Tensor, mask: Tensor, spec: Any) -> tuple[Tensor, ...]:
    """SAPO (Qwen, 2025): a soft gate instead of the hard clip, ``ℓ = −(4/τ)·σ(τ·(r − 1))·A`` with
    ``τ = sapo_tau_pos`` where A > 0, else ``sapo_tau_neg`` (its gradient is ``r``'s at ``r = 1`` and fades
    smoothly off-policy). Nothing is clipped."""
    ratio = (logprobs - old).exp()
    tau = adv.new_full(adv.shape, spec.sapo_tau_neg).masked_fill(adv > 0, spec.sapo_tau_pos)
    gate = (tau * (ratio - 1.0)).sigmoid() * 4.0 / tau
    zeros = mask.new_zeros(mask.shape)
    return -gate * adv, zeros, zeros


def gmpo(logprobs: Tensor, old: Tensor, adv: Tensor, mask: Tensor, spec: Any) -> tuple[Tensor, ...]:
    """GMPO (Zhao et al. 2025): the geometric mean of the token ratios, each clipped in log space to
    ``[−ε_low, ε_high]`` the PPO way (only the side that bounds the update for the sign of A):
    ``ℓ = −A·exp(mean_t sgn(A)·min(sgn(A)·Δ_t, sgn(A)·clip(Δ_t)))`` with ``Δ_t = logp − logp_old``, the same for
    every token of the sequence. The paper's range is ``(e^−0.4, e^0.4)``: ε = 0.4."""
    eps_low, eps_high = _bounds(spec)
    delta = logprobs - old
    sign = adv.sign()
    bounded = sign * (sign * delta).minimum(sign * delta.clamp(-eps_low, eps_high))
    per_seq = -adv * _sequence_log_ratio(bounded, mask).exp()
    low, high = _clip_flags(delta, adv, -eps_low, eps_high)
    return per_seq * mask.new_ones(mask.shape), low, high


# name → (logprobs, old logprobs, advantages [B, 1], mask, LossSpec) → (per-token loss, clipped low, clipped high)
POLICY_LOSSES: dict[str, Callable[..., tuple[Tensor, ...]]] = {
    "ppo_clip": ppo_clip,
    "gspo": gspo,
    "cispo": cispo,
    "sapo": sapo,
    "gmpo": gmpo,
}
