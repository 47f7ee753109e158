"""Co-RL's peer reward: agent i's pseudo-label for a problem is the majority answer of its supervisors.

Inputs are keyed by problem id (``{problem_id: [K extracted answers]}``, None = unparseable), never by
position, and every agent must answer exactly the same ids: a mismatch raises instead of silently pairing
the wrong problems (the public release compared only list lengths). Rewards are 1.0 when a completion's answer
is equivalent to its label (label as gold), else 0.0; a problem without a label (no parseable supervisor
answer, a tie under ``tie_policy="none"``, or a share below ``min_share``) gives 0.0 everywhere, hence zero
advantage and no update from it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from corl_vl.answers.equivalence import equivalent
from corl_vl.answers.voting import Vote, vote
from corl_vl.errors import CorlError
from corl_vl.rewards.topology import Topology

Answers = Mapping[str, Sequence[str | None]]
Choices = Mapping[str, Sequence[str] | None]


def check_same_ids(answers: Sequence[Answers], what: str = "agent") -> None:
    """Raise CorlError naming the first agents and ids that differ."""
    if not answers:
        return
    reference = set(answers[0])
    for k, other in enumerate(answers[1:], start=1):
        keys = set(other)
        if keys != reference:
            missing = sorted(reference - keys)[:3]
            extra = sorted(keys - reference)[:3]
            raise CorlError(
                f"{what} {k} answered different problem ids than {what} 0: "
                f"missing {missing}, unexpected {extra} (answers must be keyed by the same problem ids)"
            )


def peer_pseudo_labels(
    answers: Sequence[Answers],
    topology: Topology,
    *,
    choices: Choices | None = None,
    tie_policy: str = "none",
    min_share: float = 0.0,
    timeout: float | None = None,
) -> list[dict[str, Vote]]:
    """For each agent i and problem id: the vote over the pooled answers of i's supervisors.

    ``answers[j]`` are agent j's answers; supervisors' answers are pooled in supervisor order (this only
    matters for ``tie_policy="first"``). Agent i's own answers never vote for its labels.
    """
    if len(answers) != topology.n_agents:
        raise CorlError(f"got answers from {len(answers)} agents for a topology of {topology.n_agents}")
    check_same_ids(answers)
    choices = choices or {}
    labels: list[dict[str, Vote]] = []
    for i in range(topology.n_agents):
        sups = topology.supervisors(i)
        labels.append(
            {
                pid: vote(
                    [a for j in sups for a in answers[j][pid]],
                    choices=choices.get(pid),
                    tie_policy=tie_policy,
                    min_share=min_share,
                    timeout=timeout,
                )
                for pid in answers[i]
            }
        )
    return labels


def match_rewards(
    answers: Answers,
    labels: Mapping[str, str | None],
    choices: Choices | None = None,
    *,
    timeout: float | None = None,
) -> dict[str, list[float]]:
    """1.0 for each answer equivalent to its problem's label (label as gold), else 0.0; no label → all 0.0."""
    choices = choices or {}
    rewards: dict[str, list[float]] = {}
    for pid, group in answers.items():
        if pid not in labels:
            raise CorlError(f"no label entry for problem id {pid!r}")
        label = labels[pid]
        rewards[pid] = [
            1.0 if label is not None and equivalent(label, a, choices.get(pid), timeout=timeout) else 0.0
            for a in group
        ]
    return rewards


def peer_rewards(
    answers: Sequence[Answers],
    topology: Topology,
    *,
    choices: Choices | None = None,
    tie_policy: str = "none",
    min_share: float = 0.0,
    timeout: float | None = None,
) -> tuple[list[dict[str, list[float]]], list[dict[str, Vote]]]:
    """Co-RL rewards for every agent: ``(rewards[i][pid] -> K floats, labels[i][pid] -> Vote)``."""
    labels = peer_pseudo_labels(
        answers, topology, choices=choices, tie_policy=tie_policy, min_share=min_share, timeout=timeout
    )
    rewards = [
        match_rewards(answers[i], {pid: v.label for pid, v in labels[i].items()}, choices, timeout=timeout)
        for i in range(topology.n_agents)
    ]
    return rewards, labels
