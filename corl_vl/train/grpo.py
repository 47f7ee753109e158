"""GRPO maths, pure torch: group advantages, the policy loss, aggregation, KL, entropy, importance weights.

Why a module of its own: these few lines decide what every update does, so they are kept free of model code
and tested on hand-computed numbers (``tests/test_grpo.py``). The trainer hands in per-token logprobs it got
from a model adapter; nothing here knows which model produced them.

Shapes: ``B`` completions (all groups of one step, flattened group-major), ``T`` completion tokens (padded);
``mask`` is 1 on real completion tokens, 0 on padding.

Conventions chosen (and tested):
- the std in the std-scaled advantage is the *sample* std (Bessel-corrected, ``torch.std`` default), as TRL
  computes it; a group of one completion gets advantage 0;
- the importance weight ``ρ_t`` and the KL term are added the way TRL does: ``ρ_t`` multiplies the policy
  term, the ``β·KL`` term is added afterwards (it is not re-weighted).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from corl_vl.errors import CorlError
from corl_vl.losses.objectives import ADVANTAGES, KL_ESTIMATORS, LOSS_TYPES
from corl_vl.losses.policy_losses import POLICY_LOSSES
from corl_vl.losses.rollout_correction import CORRECTIONS

STD_EPS = 1e-4


def group_advantages(rewards: Tensor, *, scale: str = "grpo", eps: float = STD_EPS) -> Tensor:
    """Group-relative advantages for rewards of shape ``[G, K]`` (G groups of K completions).

    ``scale="grpo"``: ``(r − mean) / (std + eps)`` with the sample std; ``"dr_grpo"``: ``r − mean`` (Dr. GRPO
    drops the std because it up-weights near-unanimous groups). Groups whose rewards are all equal get exactly
    0 either way, so they contribute no gradient.
    """
    if scale not in ADVANTAGES:
        raise CorlError(f"grpo.advantage must be one of {tuple(ADVANTAGES)}, got '{scale}'")
    rewards = rewards.to(torch.float64)
    if rewards.shape[-1] < 2:
        return torch.zeros_like(rewards)
    centred = rewards - rewards.mean(dim=-1, keepdim=True)
    constant = (rewards == rewards[..., :1]).all(dim=-1, keepdim=True)
    centred = ADVANTAGES[scale](centred, rewards, eps)
    return torch.where(constant, torch.zeros_like(centred), centred)


def kl_k3(logprobs: Tensor, ref_logprobs: Tensor) -> Tensor:
    """Per-token k3 estimator of KL(π‖π_ref): ``exp(ref − logp) − (ref − logp) − 1`` (≥ 0, unbiased)."""
    return KL_ESTIMATORS["k3"](logprobs, ref_logprobs)


@dataclass
class ImportanceWeights:
    """Token-level importance weights of the trainer w.r.t. the rollout engine, and their statistics."""

    rho: Tensor  # [B, T], corrected (truncated or masked), 1 on padding and on non-finite rollout logprobs
    metrics: dict[str, float]


def importance_weights(
    trainer_logprobs: Tensor,
    rollout_logprobs: Tensor,
    mask: Tensor,
    *,
    cap: float | None,
    mode: str = "token_tis",
) -> ImportanceWeights:
    """``ρ_t = exp(logp_trainer_old − logp_rollout)`` corrected by ``mode`` (``grpo.rollout_correction``,
    :mod:`corl_vl.losses.rollout_correction`) at threshold ``cap``; no gradient. ``cap=None``: raw ratios.

    Why: the rollout engine (vLLM, bf16 kernels) and the trainer compute slightly different distributions; the
    ratio corrects the off-policy bias, the cap bounds its variance. Non-finite rollout logprobs (seen with
    one built-in family in vLLM, docs/adapters.md) are contained: those tokens get the neutral weight 1 and are counted, never propagated.
    Statistics (min/mean/max of the raw ratio before any correction, and of |Δlogp|) are over real tokens with
    finite logprobs; ``is/truncated_frac`` or ``is/masked_frac`` is the share of those tokens (token modes) or of
    the sequences with any (sequence modes) that the correction truncated or masked.
    """
    trainer_logprobs = trainer_logprobs.detach()
    rollout_logprobs = rollout_logprobs.detach().to(trainer_logprobs.dtype)
    real = mask.bool()
    finite = torch.isfinite(rollout_logprobs) & torch.isfinite(trainer_logprobs)
    used = real & finite
    diff = torch.where(used, trainer_logprobs - rollout_logprobs, torch.zeros_like(trainer_logprobs))
    raw = torch.exp(diff)
    correction = CORRECTIONS[mode] if cap is not None else None
    rho, affected = correction.weights(diff, used, cap) if correction is not None else (raw, None)
    rho = torch.where(used, rho, torch.ones_like(rho))
    n_used = int(used.sum())
    metrics: dict[str, float] = {"is/nonfinite_tokens": float((real & ~finite).sum())}
    if n_used:
        raw_used, diff_used = raw[used], diff[used].abs()
        metrics.update(
            {
                "is/ratio_min": float(raw_used.min()),
                "is/ratio_mean": float(raw_used.mean()),
                "is/ratio_max": float(raw_used.max()),
                "is/truncated_frac": 0.0,
                "is/logprob_diff_mean": float(diff_used.mean()),
                "is/logprob_diff_max": float(diff_used.max()),
            }
        )
        if correction is not None:  # a [B, T] token share, or a [B] share of the sequences with used tokens
            among = used if affected.dim() == 2 else used.any(-1)
            metrics[f"is/{correction.kind}_frac"] = float(affected[among].float().mean())
    return ImportanceWeights(rho=rho, metrics=metrics)


@dataclass(frozen=True)
class LossSpec:
    """How per-token losses become one scalar (see :func:`policy_loss`)."""

    epsilon: float = 0.2
    epsilon_high: float | None = None  # None → symmetric clipping
    # KL coefficient in the loss; 0 → none (grpo.kl_placement: reward puts it in the reward)
    beta: float = 0.0
    loss_type: str = "bnpo"
    max_len: int | None = None  # dr_grpo's constant length (max_new_tokens); None → padded T
    policy_loss: str = "ppo_clip"  # corl_vl.losses.policy_losses
    sapo_tau_pos: float = 1.0
    sapo_tau_neg: float = 1.05
    kl_estimator: str = "k3"
    entropy_coef: float = 0.0  # entropy bonus: −coef·H_t added to each token's loss

    @classmethod
    def of(cls, grpo: Any) -> LossSpec:
        """The spec of a ``grpo`` config section; ``kl_placement: reward`` leaves β out of the loss (the cohort's
        :mod:`corl_vl.train.reward_shaping` puts it in the reward)."""
        return cls(
            epsilon=grpo.epsilon,
            epsilon_high=grpo.epsilon_high,
            beta=grpo.beta if grpo.kl_placement == "loss" else 0.0,
            loss_type=grpo.loss_type,
            max_len=grpo.max_new_tokens,
            policy_loss=grpo.policy_loss,
            sapo_tau_pos=grpo.sapo_tau_pos,
            sapo_tau_neg=grpo.sapo_tau_neg,
            kl_estimator=grpo.kl_estimator,
            entropy_coef=grpo.entropy_coef,
        )

    def __post_init__(self) -> None:
        names = {
            "loss_type": (self.loss_type, LOSS_TYPES),
            "policy_loss": (self.policy_loss, POLICY_LOSSES),
            "kl_estimator": (self.kl_estimator, KL_ESTIMATORS),
        }
        for key, (value, table) in names.items():
            if value not in table:
                raise CorlError(f"grpo.{key} must be one of {tuple(table)}, got '{value}'")


@dataclass(frozen=True)
class Normalizer:
    """Batch totals a micro-batch's loss is divided by, so micro-batch losses *sum* to the full-batch loss.

    ``n_sequences``: completions in the whole batch; ``n_tokens``: real completion tokens in the whole batch.
    """

    n_sequences: int
    n_tokens: int

    @classmethod
    def of(cls, mask: Tensor) -> Normalizer:
        return cls(n_sequences=int(mask.shape[0]), n_tokens=int(mask.sum()))


def policy_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    spec: LossSpec,
    *,
    ref_logprobs: Tensor | None = None,
    rho: Tensor | None = None,
    entropy: Tensor | None = None,
    normalizer: Normalizer | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """The policy loss ``spec.policy_loss``, aggregated per ``spec.loss_type``; returns ``(loss, metrics)``.

    Per token: ``ℓ_t`` of the policy loss (:mod:`corl_vl.losses.policy_losses`; ``ppo_clip``:
    ``r = exp(logp − logp_old)``, ``ℓ = −min(r·A, clip(r, 1−ε, 1+ε_high)·A)``), times ``ρ_t`` if given, plus
    ``β·KL_t`` (``spec.kl_estimator``) if ``β > 0``, minus ``entropy_coef·H_t`` if that is not 0 (then
    ``entropy`` must carry the gradient). Aggregation:
    - ``bnpo``: ``Σ ℓ·m / Σ m`` over the whole batch (token mean, DAPO);
    - ``grpo``: mean over sequences of each sequence's token mean;
    - ``dr_grpo``: ``Σ ℓ·m / (B · max_len)`` with a constant ``max_len`` (no length bias).
    With micro-batches pass the full batch's :class:`Normalizer`; the micro-batch losses then add up exactly.
    Metric values are means over this call's real tokens.
    """
    mask = mask.to(logprobs.dtype)
    norm = normalizer or Normalizer.of(mask)
    adv = advantages.to(logprobs.dtype).unsqueeze(-1)
    old_logprobs = old_logprobs.detach()
    per_token, low, high = POLICY_LOSSES[spec.policy_loss](logprobs, old_logprobs, adv, mask, spec)
    if rho is not None:
        per_token = per_token * rho.detach().to(per_token.dtype)
    kl = None
    if spec.beta != 0.0:
        if ref_logprobs is None:
            raise CorlError("grpo.beta > 0 needs reference logprobs (a frozen reference model)")
        kl = KL_ESTIMATORS[spec.kl_estimator](logprobs, ref_logprobs.detach())
        per_token = per_token + spec.beta * kl
    if spec.entropy_coef != 0.0:
        if entropy is None:
            raise CorlError("grpo.entropy_coef ≠ 0 needs the entropy of every token (with its gradient)")
        per_token = per_token - spec.entropy_coef * entropy

    max_len = spec.max_len if spec.max_len is not None else logprobs.shape[-1]
    aggregate = LOSS_TYPES[spec.loss_type]  # corl_vl.losses.objectives
    loss = aggregate(per_token * mask, mask, norm.n_sequences, norm.n_tokens, max_len)

    n_tok = mask.sum().clamp(min=1.0)

    def token_mean(x: Tensor) -> float:
        return float((x.detach() * mask).sum() / n_tok)

    ratio = torch.exp(logprobs.detach() - old_logprobs)
    low, high = low.to(mask.dtype), high.to(mask.dtype)
    metrics = {
        "clip/low_frac": token_mean(low),
        "clip/high_frac": token_mean(high),
        "clip/frac": token_mean(low + high),
        "ratio/mean": token_mean(ratio),
    }
    if kl is not None:
        metrics["kl"] = token_mean(kl)
    if entropy is not None:
        metrics["entropy"] = token_mean(entropy)
    return loss, metrics


def masked_mean(values: Tensor, mask: Tensor) -> float:
    """Mean of ``values`` over real tokens (0.0 if there are none); for logging."""
    total = float(mask.sum())
    return float((values.detach() * mask).sum()) / total if total else 0.0


def masked_group_advantages(rewards: Tensor, keep: Tensor, *, scale: str = "grpo") -> Tensor:
    """:func:`group_advantages` over each group's kept completions only (``keep``: ``[G, K]`` bool); the left-out
    ones get 0. ``grpo.truncated: drop`` uses it: a truncated completion neither trains nor moves its group's
    mean and std."""
    out = torch.zeros(rewards.shape, dtype=torch.float64)
    for g in range(rewards.shape[0]):
        kept = keep[g].nonzero().flatten()
        if len(kept):
            out[g, kept] = group_advantages(rewards[g, kept].unsqueeze(0), scale=scale)[0]
    return out
