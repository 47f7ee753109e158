"""``grpo.dynamic_sampling: B``: train on groups whose rewards vary, drawing more problems when needed.

Why: a group whose k rewards are all equal has advantage 0 everywhere and teaches nothing, yet it still
dilutes the token-mean loss of the others; when most groups are like that (early Co-RL steps: no labels, or
unanimous agents) the step is mostly noise. As in DAPO, such groups are dropped and further batches of
problems are drawn (at most ``B`` extra draws per step) until every agent has ``data.problems_per_step``
groups whose rewards vary. Should the bound be hit, an agent's batch is topped up with its first draw's other
groups (they train nothing, the batch keeps its size).

Each draw is a full cohort draw: every agent samples the same problem ids, answers are exchanged and labels
voted keyed by id, exactly as in a plain step — so labels stay consistent across agents; only which groups an
agent *trains* on is its own (its rewards decide whether a group varies). A stateful reward (Co-RL's
reliability averages) sees every draw. The step's reward and label metrics describe the first draw, so they
compare with runs without dynamic sampling; ``dynamic/draws`` and ``dynamic/varied_groups`` say what it did.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from corl_vl.errors import CorlError
from corl_vl.train.batch import fit_width


def check(dynamic_sampling: int, reward: Any, reward_name: str) -> None:
    """Refused from the config alone (``grpo.dynamic_sampling`` with ``reward``, the step reward of
    ``reward.name``; config validation makes the same check before any model loads)."""
    if dynamic_sampling and reward.paired_views:
        raise CorlError(f"grpo.dynamic_sampling: reward.name={reward_name} pairs views; set it to 0")


def _groups(step: Any) -> list[tuple[str, int, bool]]:
    """``(problem id, group index, rewards vary)`` of each group of a step."""
    return [(r.problem_id, g, len(set(step.rewards[r.problem_id])) > 1) for g, r in enumerate(step.rollouts)]


def fill_batch(cohort: Any, first: list[Any], times: dict[str, float]) -> tuple[list[Any], dict[str, Any]]:
    """Per agent, as many groups whose rewards vary as its first draw has (``data.problems_per_step``, or this
    process's share of it under torchrun; see the module doc); returns the AgentSteps to train and
    ``{agent: metrics}``. Under torchrun every process draws again while any one still misses groups: a draw
    exchanges answers between processes, so all of them draw together (the extra groups of a full one are
    simply not kept)."""
    wants = [len(step.rollouts) for step in first]
    bound, dist = cohort.cfg.grpo.dynamic_sampling, cohort.dist
    kept: list[list[tuple[Any, int]]] = [[] for _ in first]
    seen: list[set[str]] = [set() for _ in first]
    steps, draws = first, 0
    while True:
        for i, step in enumerate(steps):
            for pid, g, varies in _groups(step):
                if varies and len(kept[i]) < wants[i] and pid not in seen[i]:
                    kept[i].append((step, g))
                    seen[i].add(pid)
        missing = any(len(k) < want for k, want in zip(kept, wants))
        if dist is not None:
            missing = dist.any_flag(missing, "grpo.dynamic_sampling: draw again")
        if not missing or draws == bound:
            break
        draws += 1
        ids = cohort.sampler.next(cohort.cfg.data.problems_per_step)
        steps, _ = cohort._draw(ids, ids if dist is None else dist.my_share(ids), times, draw=draws)
    out, metrics = [], {}
    for agent, step, groups, ids, want in zip(cohort.agents, first, kept, seen, wants):
        metrics[agent.name] = {"dynamic/draws": float(draws), "dynamic/varied_groups": float(len(groups))}
        top_up = [(step, g) for pid, g, _ in _groups(step) if pid not in ids][: want - len(groups)]
        out.append(_assemble(step, groups + top_up))
    return out, metrics


def _assemble(template: Any, groups: list[tuple[Any, int]]) -> Any:
    """One AgentStep of the given groups (each ``(its step, its index there)``)."""
    rollouts = [step.rollouts[g] for step, g in groups]
    ids = [r.problem_id for r in rollouts]
    labels = {pid: step.labels[pid] for (step, _), pid in zip(groups, ids) if pid in step.labels}
    return dataclasses.replace(
        template,
        prompts=[step.prompts[g] for step, g in groups],
        rollouts=rollouts,
        answers={pid: step.answers[pid] for (step, _), pid in zip(groups, ids)},
        rewards={pid: step.rewards[pid] for (step, _), pid in zip(groups, ids)},
        labels=labels,
        scored=_scored_rows(groups),
        advantages=[],
    )


def _scored_rows(groups: list[tuple[Any, int]]) -> Any:
    """The no-grad pass's rows of the given groups, as wide as their longest completion (a dropped group of
    the same draw may have been longer), 0-padded (None when the pass did not run)."""
    if not groups or groups[0][0].scored is None:
        return None
    width = max(len(c.ids) for step, g in groups for c in step.rollouts[g].completions)
    parts = []
    for step, g in groups:
        k = len(step.rollouts[g].completions)
        rows = {
            n: v[g * k : (g + 1) * k] for n, v in vars(step.scored).items() if isinstance(v, torch.Tensor)
        }
        parts.append(fit_width(dataclasses.replace(step.scored, **rows), width))
    fields = {
        name: torch.cat([getattr(part, name) for part in parts])
        for name, value in vars(parts[0]).items()
        if isinstance(value, torch.Tensor)
    }
    return dataclasses.replace(parts[0], **fields)
