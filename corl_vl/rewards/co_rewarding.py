"""Co-rewarding-I: one model, two views of each problem (original and an answer-preserving rephrase); each
view's completions are rewarded by the majority answer of the *other* view's completions.

It is the peer reward over a mutual topology whose two "agents" are the two views of one model, so it shares
the same voting, tie policy and id checks.
"""

from __future__ import annotations

from corl_vl.rewards.peer import Answers, Choices, peer_rewards
from corl_vl.rewards.topology import mutual


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
    rewards, _labels = peer_rewards(
        [original_answers, rephrased_answers],
        mutual(),
        choices=choices,
        tie_policy=tie_policy,
        min_share=min_share,
        timeout=timeout,
    )
    return rewards[0], rewards[1]
