"""``reward.combine``: the main reward plus weighted extra rewards (format, length, a plugin's …).

Why a wrapper spec: the cohort asks one :class:`~corl_vl.rewards.registry.RewardSpec` for rewards and for what
it needs (peers, scores, golds); the combined spec answers for all of its parts, and keeps the main reward's
labels (the extra rewards only add to each completion's reward, they never vote).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from corl_vl.errors import CorlError
from corl_vl.rewards.boundary import guarded
from corl_vl.rewards.registry import RewardInputs, Rewards, RewardSpec, StepRewards, get_reward

if TYPE_CHECKING:  # types only: config_validation reads the reward registry, not the other way round
    from corl_vl.config import RewardConfig


def add_weighted(total: Rewards, part: Rewards, weight: float) -> Rewards:
    """``total + weight · part``, completion by completion; both must cover the same agents, ids and counts."""
    out: Rewards = {}
    for name, groups in total.items():
        out[name] = {}
        for pid, values in groups.items():
            extra = part.get(name, {}).get(pid)
            if extra is None or len(extra) != len(values):
                raise CorlError(f"reward.combine: a reward gave no {len(values)} rewards for {name}/{pid}")
            out[name][pid] = [v + weight * e for v, e in zip(values, extra)]
    return out


def parse_combine(entries: Sequence[Any]) -> list[tuple[str, float]]:
    """``[{name, weight}, …]`` → ``[(name, weight)]`` with one clear error per malformed entry."""
    parsed = []
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict) or set(entry) - {"name", "weight"} or "name" not in entry:
            raise CorlError(
                f"reward.combine.{i}: expected {{name: <reward>, weight: <number>}}, got {entry!r}"
            )
        weight = entry.get("weight", 1.0)
        if isinstance(weight, bool) or not isinstance(weight, (int, float)):
            raise CorlError(f"reward.combine.{i}.weight: expected a number, got {weight!r}")
        parsed.append((str(entry["name"]), float(weight)))
    return parsed


def step_reward(reward: RewardConfig) -> RewardSpec:
    """The reward the cohort trains with: ``reward.name``, plus ``reward.combine``'s weighted parts."""
    # a plug-in (the user's code) runs behind the boundary: read-only inputs, its output checked
    main = guarded(reward.name, get_reward(reward.name))
    parts = [(guarded(name, get_reward(name)), weight) for name, weight in parse_combine(reward.combine)]
    for (name, _), (spec, _) in zip(parse_combine(reward.combine), parts):
        if spec.uses_peers or spec.paired_views or spec.make_state is not None:
            raise CorlError(f"reward.combine: '{name}' votes or keeps state; only reward.name may")
    if not parts:
        return main

    def combined(inputs: RewardInputs) -> StepRewards:
        rewards, labels = main.function(inputs)
        for spec, weight in parts:
            rewards = add_weighted(rewards, spec.function(inputs).rewards, weight)
        return StepRewards(rewards, labels)

    return replace(
        main,
        function=combined,
        uses_scores=main.uses_scores or any(spec.uses_scores for spec, _ in parts),
        needs_gold=main.needs_gold or any(spec.needs_gold for spec, _ in parts),
    )
