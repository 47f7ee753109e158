"""Reward shaping before the group advantages: DAPO's soft overlong penalty and the KL penalty in the reward.

Why before the advantages: both change what a completion is worth relative to its group, as in the peers (verl
``reward_manager`` overlong buffer, verl ``use_kl_in_reward``), so they enter the reward and then the group's
mean and std like any reward — unlike ``grpo.kl_placement: loss``, which adds β·KL to every token's loss.
Off by default (``grpo.overlong_buffer: 0``, ``grpo.kl_placement: loss``): the rewards are then returned as given.
"""

from __future__ import annotations

from typing import Any

import torch

from corl_vl.losses.objectives import KL_ESTIMATORS
from corl_vl.train import subsets


def overlong_penalty(lengths: torch.Tensor, *, max_len: int, buffer: int, factor: float) -> torch.Tensor:
    """DAPO's soft overlong punishment: 0 up to ``max_len − buffer`` tokens, then falling linearly to ``−factor``
    at ``max_len``: ``min(0, −(L − (max_len − buffer)) / buffer · factor)`` (verl's overlong buffer)."""
    exceed = lengths.to(torch.float64) - (max_len - buffer)
    return torch.clamp(-exceed / buffer * factor, max=0.0)


def sequence_kl(agent: Any, step: Any) -> torch.Tensor:
    """``[B]`` Σ_t KL_t (``grpo.kl_estimator``) of each completion between the trainer before the update and the
    frozen reference, no gradient. Sets ``step.scored`` to the trainer's pass, which the update then reuses."""
    prompts, completions = subsets.step_rows(step)
    if step.scored is None:
        step.scored = agent.score(prompts, completions)
    ref = agent.score(prompts, completions, model=agent.ref_model).logprobs
    kl = KL_ESTIMATORS[agent.settings.grpo.kl_estimator](step.scored.logprobs, ref)
    return (kl * step.scored.mask).sum(-1).to(torch.float64).cpu()


def shape_rewards(agent: Any, step: Any, rewards: torch.Tensor) -> tuple[torch.Tensor, dict[str, float]]:
    """``rewards`` ([G, K]) with the overlong penalty and β·Σ_t KL_t subtracted, where those are on; and metrics
    (``shaping/overlong_penalty``, ``shaping/kl_penalty``: means over the completions)."""
    grpo = agent.settings.grpo
    metrics: dict[str, float] = {}
    if grpo.overlong_buffer > 0:
        lengths = torch.tensor([[len(c.ids) for c in r.completions] for r in step.rollouts])
        penalty = overlong_penalty(
            lengths, max_len=grpo.max_new_tokens, buffer=grpo.overlong_buffer, factor=grpo.overlong_penalty
        )
        rewards = rewards + penalty
        metrics["shaping/overlong_penalty"] = float(penalty.mean())
    if grpo.kl_placement == "reward" and grpo.beta > 0 and agent.ref_model is not None:
        kl = grpo.beta * sequence_kl(agent, step).reshape(rewards.shape)
        rewards = rewards - kl
        metrics["shaping/kl_penalty"] = float(kl.mean())
    return rewards, metrics


def advantages(
    agent: Any, step: Any, rewards: torch.Tensor, cut: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor | None, dict[str, float]]:
    """The agent's flat advantages and trained rows (:func:`corl_vl.train.subsets.advantages_and_rows`) from its
    shaped rewards, and the shaping's metrics; ``cut``: the completions that hit ``grpo.max_new_tokens``."""
    grpo = agent.settings.grpo
    rewards, metrics = shape_rewards(agent, step, rewards)
    adv, trained = subsets.advantages_and_rows(rewards, cut, mode=grpo.truncated, scale=grpo.advantage)
    return adv, trained, metrics
