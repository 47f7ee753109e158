"""Which of a step's completions are trained: the first ``grpo.k`` of ``grpo.votes`` (the rest only vote), and
what ``grpo.truncated`` does with completions that hit ``grpo.max_new_tokens``.

Why the first k: the completions of a group are independent samples, so the first k are an unbiased subset of
the votes (TTRL trains ``n_samples_per_prompt`` of its ``n_votes_per_prompt``); the vote itself, and so every
label, uses all of them.

``grpo.truncated``:
- ``keep``: a truncated completion is trained like any other;
- ``mask``: it keeps its place in the group (its reward counts in the group's mean and std) but has no loss
  and is left out of the loss totals (TRL ``mask_truncated_completions``);
- ``drop``: it is also left out of its group's advantage statistics.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from corl_vl.train.batch import fit_width
from corl_vl.train.grpo import group_advantages, masked_group_advantages


def first_k(step: Any, k: int) -> Any:
    """An :class:`~corl_vl.train.cohort.AgentStep` cut to the first ``k`` completions of every group (rollouts,
    answers, rewards and the no-grad pass's rows); labels are the vote's, unchanged."""
    votes = len(step.rollouts[0].completions) if step.rollouts else k
    if votes == k:
        return step
    rollouts = [dataclasses.replace(r, completions=r.completions[:k]) for r in step.rollouts]
    scored = step.scored
    if scored is not None:
        rows = torch.tensor([g * votes + j for g in range(len(step.rollouts)) for j in range(k)])
        fields = {n: v[rows.to(v.device)] for n, v in vars(scored).items() if isinstance(v, torch.Tensor)}
        width = max((len(c.ids) for r in rollouts for c in r.completions), default=0)
        scored = fit_width(dataclasses.replace(scored, **fields), width)  # the longest may only have voted
    return dataclasses.replace(
        step,
        rollouts=rollouts,
        answers={pid: answers[:k] for pid, answers in step.answers.items()},
        rewards={pid: rewards[:k] for pid, rewards in step.rewards.items()},
        scored=scored,
    )


def truncated(rollouts: list[Any]) -> torch.Tensor:
    """``[G, K]`` bool: the completions that hit ``grpo.max_new_tokens``."""
    return torch.tensor(
        [[c.finish_reason == "length" for c in r.completions] for r in rollouts], dtype=torch.bool
    )


def advantages_and_rows(
    rewards: torch.Tensor, cut: torch.Tensor, *, mode: str, scale: str
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Flat float32 advantages and the rows the loss may use (None: all) under ``grpo.truncated = mode``."""
    if mode == "keep":
        return group_advantages(rewards, scale=scale).reshape(-1).to(torch.float32), None
    if mode == "mask":
        adv = group_advantages(rewards, scale=scale)
    else:  # drop
        adv = masked_group_advantages(rewards, ~cut, scale=scale)
    return adv.reshape(-1).to(torch.float32), (~cut).reshape(-1)


# ------------------------------------------------------------------ a step's rows, flattened group-major
def step_rows(step: Any) -> tuple[list[Any], list[list[int]]]:
    """Each completion's prompt and token ids."""
    prompts = [p for p, r in zip(step.prompts, step.rollouts) for _ in r.completions]
    return prompts, [c.ids for r in step.rollouts for c in r.completions]


def rollout_logprobs(step: Any) -> torch.Tensor:
    """``[B, T]`` the engine's logprobs of every completion, 0-padded."""
    comps = [c for r in step.rollouts for c in r.completions]
    out = torch.zeros(len(comps), max((len(c.ids) for c in comps), default=0), dtype=torch.float32)
    for i, c in enumerate(comps):
        out[i, : len(c.logprobs)] = torch.tensor(c.logprobs, dtype=torch.float32)
    return out


def texts(step: Any, ids: list[str]) -> dict[str, list[str]]:
    """The raw completion texts per problem id (what a format reward reads)."""
    by_id = {r.problem_id: r for r in step.rollouts}
    return {pid: [c.text for c in by_id[pid].completions] for pid in ids}


def token_counts(step: Any, ids: list[str]) -> dict[str, list[int]]:
    by_id = {r.problem_id: r for r in step.rollouts}
    return {pid: [len(c.ids) for c in by_id[pid].completions] for pid in ids}


def reward_tensor(step: Any) -> torch.Tensor:
    """``[G, K]`` float64 rewards of a step's groups, in rollout order."""
    return torch.tensor([step.rewards[r.problem_id] for r in step.rollouts], dtype=torch.float64)
