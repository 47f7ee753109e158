"""Label-free single-model baselines (docs/reference.md#baselines-reward-per-completion): TTRL, EMPO, Intuitor,
RENT.

TTRL and EMPO are functions of extracted answers (``{problem_id: [K answers]}``). Intuitor and RENT are
functions of the policy's per-token distributions and take torch tensors:

- ``scores`` of shape ``[B, T, V]``: full-vocabulary logits *or* full-vocabulary log-probabilities (identical
  result, because ``log_softmax(x / τ)`` does not change when a per-token constant is added to x), scaled by
  ``temperature`` before use;
- or ``scores`` of shape ``[B, T]``: the per-token quantity already computed (self-certainty for Intuitor,
  entropy for RENT), e.g. by a trainer that streams the vocabulary in chunks;
- ``mask`` ``[B, T]``: 1 on completion tokens, 0 on prompt/padding. A row without completion tokens gets 0.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from corl_vl.answers.voting import cluster_answers, vote
from corl_vl.rewards.peer import Answers, Choices, match_rewards

if TYPE_CHECKING:
    import torch


def ttrl_labels(
    answers: Answers,
    choices: Choices | None = None,
    *,
    tie_policy: str = "none",
    min_share: float = 0.0,
    timeout: float | None = None,
) -> dict[str, str | None]:
    """TTRL's label per problem: the majority of the agent's *own* K answers (None: tie or no answer)."""
    choices = choices or {}
    return {
        pid: vote(
            group, choices=choices.get(pid), tie_policy=tie_policy, min_share=min_share, timeout=timeout
        ).label
        for pid, group in answers.items()
    }


def ttrl_rewards(
    answers: Answers,
    choices: Choices | None = None,
    *,
    tie_policy: str = "none",
    min_share: float = 0.0,
    timeout: float | None = None,
) -> dict[str, list[float]]:
    """TTRL: 1.0 when an answer equals the majority of the agent's *own* K answers, else 0.0."""
    labels = ttrl_labels(answers, choices, tie_policy=tie_policy, min_share=min_share, timeout=timeout)
    return match_rewards(answers, labels, choices or {}, timeout=timeout)


def empo_rewards(
    answers: Answers, choices: Choices | None = None, *, timeout: float | None = None
) -> dict[str, list[float]]:
    """EMPO: each answer's reward is the frequency of its equivalence cluster among the K answers
    (unparseable answers count in K and get 0); when every cluster is a singleton, all rewards are 0."""
    choices = choices or {}
    rewards: dict[str, list[float]] = {}
    for pid, group in answers.items():
        clusters = cluster_answers(group, choices=choices.get(pid), timeout=timeout)
        if all(len(c) <= 1 for c in clusters):
            rewards[pid] = [0.0] * len(group)
            continue
        size_of = {spelling: len(c) for c in clusters for spelling in c}
        rewards[pid] = [size_of.get(a, 0) / len(group) if a is not None else 0.0 for a in group]
    return rewards


def _masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    mask = mask.to(values.dtype)
    return (values * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)


def token_self_certainty(scores: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """Per-token self-certainty ``logsumexp(x) − mean_v x`` with ``x = scores / τ`` ([B,T,V] → [B,T])."""
    x = scores.float() / temperature
    return x.logsumexp(-1) - x.mean(-1)


def token_entropy(scores: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """Per-token entropy of ``softmax(scores / τ)`` ([B,T,V] → [B,T])."""
    # lazy: torch
    import torch

    logp = torch.log_softmax(scores.float() / temperature, dim=-1)
    return -(logp.exp() * logp).sum(-1)


def intuitor_rewards(scores: torch.Tensor, mask: torch.Tensor, *, temperature: float = 1.0) -> torch.Tensor:
    """Intuitor: mean self-certainty over completion tokens, one reward per sequence ([B])."""
    per_token = token_self_certainty(scores, temperature) if scores.dim() == 3 else scores.float()
    return _masked_mean(per_token, mask)


def rent_rewards(scores: torch.Tensor, mask: torch.Tensor, *, temperature: float = 1.0) -> torch.Tensor:
    """RENT: minus the mean token entropy over completion tokens, one reward per sequence ([B])."""
    per_token = token_entropy(scores, temperature) if scores.dim() == 3 else scores.float()
    return -_masked_mean(per_token, mask)
