"""GT reward (the supervised reference): 1.0 when an answer is equivalent to the dataset's answer."""

from __future__ import annotations

from collections.abc import Mapping

from corl_vl.errors import CorlError
from corl_vl.rewards.peer import Answers, Choices, match_rewards


def gt_rewards(
    answers: Answers,
    gold: Mapping[str, str | None],
    choices: Choices | None = None,
    *,
    timeout: float | None = None,
) -> dict[str, list[float]]:
    """1.0 per answer equivalent to ``gold[problem_id]`` (gold first), else 0.0.

    Every problem must have a gold answer: a missing one is a data error, not a zero reward.
    """
    for pid in answers:
        if gold.get(pid) is None or not str(gold[pid]).strip():
            raise CorlError(f"GT reward: problem id {pid!r} has no gold answer")
    return match_rewards(answers, gold, choices, timeout=timeout)
