"""The rollout ↔ trainer correction by name (``grpo.rollout_correction``): how the ratio between the trainer's and
the rollout engine's token probabilities becomes a weight on each token's loss.

Why: the engine (vLLM, bf16 kernels) samples from a slightly different distribution than the trainer computes
(Gemma-3 drifts most), so the update is off-policy by that much. Each mode is one function and one row here (no
torch import: the names are validated when a config is read); :func:`corl_vl.train.grpo.importance_weights`
computes the raw log-ratios ``Δ_t = logp_trainer_old − logp_rollout`` and their statistics, then calls the row.

Every function takes ``(delta, used, threshold)`` — ``[B, T]`` log-ratios (0 where not ``used``: padding and
non-finite logprobs) and the mode's threshold τ — and returns ``(weight [B, T], affected [B] or [B, T] bool)``:
the (detached) weight, and which tokens (token modes) or sequences (sequence modes) were truncated or masked.
Masking keeps a token or sequence when its ratio is in ``[1/τ, τ]`` (verl's rejection bounds, lower = 1/upper).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Tensor = Any  # torch.Tensor; not imported so that config validation stays light


def token_tis(delta: Tensor, used: Tensor, threshold: float) -> tuple[Tensor, Tensor]:
    """Token-level truncated IS (TIS): ``ρ_t = min(exp(Δ_t), τ)`` — corl-vl's behaviour before this table."""
    raw = delta.exp()
    return raw.clamp(max=threshold), raw > threshold


def token_mask(delta: Tensor, used: Tensor, threshold: float) -> tuple[Tensor, Tensor]:
    """Token-level masking (IcePop): weight 1 where ``exp(Δ_t) ∈ [1/τ, τ]``, else 0 (the token has no loss)."""
    out = delta.abs() > math.log(threshold)
    return (~out).to(delta.dtype), out


def _sequence_sum(delta: Tensor) -> Tensor:
    return delta.sum(-1, keepdim=True)  # the unused tokens hold 0


def seq_tis(delta: Tensor, used: Tensor, threshold: float) -> tuple[Tensor, Tensor]:
    """Sequence-level truncated IS: every token of a sequence gets ``min(exp(Σ_t Δ_t), τ)`` (the product of
    its token ratios, truncated)."""
    raw = _sequence_sum(delta).exp()
    return raw.clamp(max=threshold).expand_as(delta), (raw > threshold).squeeze(-1)


def seq_mask(delta: Tensor, used: Tensor, threshold: float) -> tuple[Tensor, Tensor]:
    """Sequence-level masking: a sequence whose ratio ``exp(Σ_t Δ_t)`` is outside ``[1/τ, τ]`` has no loss."""
    out = _sequence_sum(delta).abs() > math.log(threshold)
    return (~out).to(delta.dtype).expand_as(delta), out.squeeze(-1)


def geo_mask(delta: Tensor, used: Tensor, threshold: float) -> tuple[Tensor, Tensor]:
    """Geometric-mean rejection: a sequence whose geometric-mean token ratio ``exp(mean_t Δ_t)`` is outside
    ``[1/τ, τ]`` has no loss (length-independent, unlike the product)."""
    mean = _sequence_sum(delta) / used.sum(-1, keepdim=True).clamp(min=1)
    out = mean.abs() > math.log(threshold)
    return (~out).to(delta.dtype).expand_as(delta), out.squeeze(-1)


@dataclass(frozen=True)
class Correction:
    """One mode: its weight function, its default threshold τ, and whether it truncates or masks (metric name)."""

    weights: Callable[[Tensor, Tensor, float], tuple[Tensor, Tensor]]
    threshold: float
    kind: str  # "truncated" | "masked": the metric is is/<kind>_frac


CORRECTIONS: dict[str, Correction] = {
    "token_tis": Correction(token_tis, 2.0, "truncated"),
    "token_mask": Correction(token_mask, 2.0, "masked"),
    "seq_tis": Correction(seq_tis, 2.0, "truncated"),
    "seq_mask": Correction(seq_mask, 2.0, "masked"),
    "geo_mask": Correction(geo_mask, 1.1, "masked"),
}
# the values grpo.rollout_correction accepts (unset: the family's default); "none", not "off": YAML reads a bare
# off as false
MODES = ("none", *CORRECTIONS)


def resolve_correction(
    mode: str | None, agent_cap: float | None, grpo_cap: float | None, family_cap: float | None
) -> tuple[str, float | None]:
    """``(mode, threshold)`` of one agent; ``("none", None)`` when no correction applies.

    The threshold is ``agents[i].importance_ratio_cap``, else ``grpo.importance_ratio_cap``, else the mode's
    default (token_tis: the family's cap); 0 turns any correction off. Unset ``mode`` is the behaviour before
    the modes existed: token_tis at the resolved cap when one is set (the family default), else off.
    """
    explicit = agent_cap if agent_cap is not None else grpo_cap
    if mode is None:
        cap = explicit if explicit is not None else family_cap
        return ("token_tis", cap) if cap else ("none", None)
    if mode == "none" or explicit == 0:
        return "none", None
    if explicit is not None:
        return mode, explicit
    if mode == "token_tis" and family_cap:
        return mode, family_cap
    return mode, CORRECTIONS[mode].threshold
