"""Co-rewarding-I: one model, two views of each problem (original and an answer-preserving rephrase); each
view's completions are rewarded by the majority answer of the *other* view's completions.

It is the peer reward over a mutual topology whose two "agents" are the two views of one model, so it shares
the same voting, tie policy and id checks.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from corl_vl.answers.voting import Vote
from corl_vl.data.problem import Problem
from corl_vl.rewards.peer import Answers, Choices, peer_rewards
from corl_vl.rewards.topology import mutual


def co_rewarding_i_votes(
    original_answers: Answers,
    rephrased_answers: Answers,
    *,
    choices: Choices | None = None,
    tie_policy: str = "none",
    min_share: float = 0.0,
    timeout: float | None = None,
) -> tuple[list[dict[str, list[float]]], list[dict[str, Vote]]]:
    """``([rewards of the original view, of the rephrased view], [votes labelling each view])``, keyed by
    problem id: each view is labelled by the other's majority."""
    return peer_rewards(
        [original_answers, rephrased_answers],
        mutual(),
        choices=choices,
        tie_policy=tie_policy,
        min_share=min_share,
        timeout=timeout,
    )


def co_rewarding_i_rewards(
    original_answers: Answers,
    rephrased_answers: Answers,
    *,
    choices: Choices | None = None,
    tie_policy: str = "none",
    min_share: float = 0.0,
    timeout: float | None = None,
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """``(rewards of the original view, rewards of the rephrased view)``, both keyed by problem id."""
    rewards, _votes = co_rewarding_i_votes(
        original_answers,
        rephrased_answers,
        choices=choices,
        tie_policy=tie_policy,
        min_share=min_share,
        timeout=timeout,
    )
    return rewards[0], rewards[1]


# ---------------------------------------------------------------------------------------- in the cohort
# Inside the trainer the rephrased view of problem ``pid`` is a second group with its own id, the *twin*
# ``pid + TWIN``: the agent samples K completions for both in one rollout, and each group is rewarded by the
# other's majority. The twin's base problem is the original (same answer and options); the agent's view of the
# twin is its rephrase (``data_view``).
TWIN = "~rephrased"


def twin_id(problem_id: str) -> str:
    return problem_id + TWIN


def with_twins(ids: list[str]) -> list[str]:
    """``ids`` followed by their twins (the order every agent samples and every reward reads)."""
    return [*ids, *(twin_id(pid) for pid in ids)]


def twins_of(problems: Sequence[Problem]) -> list[Problem]:
    """The same problems under their twin ids."""
    return [dataclasses.replace(p, id=twin_id(p.id)) for p in problems]
