"""Co-RL's peer reward: agent i's pseudo-label for a problem is the majority answer of its supervisors.

Inputs are keyed by problem id (``{problem_id: [K extracted answers]}``, None = unparseable), never by
position, and every agent must answer exactly the same ids: a mismatch raises instead of silently pairing
the wrong problems (the public release compared only list lengths). Rewards are 1.0 when a completion's answer
is equivalent to its label (label as gold), else 0.0; a problem without a label (no parseable supervisor
answer, a tie under ``tie_policy="none"``, or a share below ``min_share``) gives 0.0 everywhere, hence zero
advantage and no update from it.

Weighted supervision (:func:`weighted_peer_rewards`): each supervisor's answers count with the log-odds of its
label-free reliability (:mod:`corl_vl.rewards.reliability`), so a collapsed peer cannot outvote a good one, and
the reward may be *soft* — the weighted share of peer votes for the completion's answer.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from corl_vl.answers.equivalence import equivalent
from corl_vl.answers.voting import TIE_POLICIES, Vote, cluster_answers, vote
from corl_vl.errors import CorlError
from corl_vl.rewards.reliability import vote_weights
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


# ------------------------------------------------------------------------------------ weighted supervision
@dataclass(frozen=True)
class WeightedVote(Vote):
    """A :class:`Vote` whose voters carry weights; ``share`` is the label's *weighted* share.

    ``shares``: (representative, weighted share) of every cluster, highest first — what a soft reward pays.
    """

    shares: list[tuple[str, float]] = field(default_factory=list)


def weighted_vote(
    groups: Sequence[Sequence[str | None]],
    reliability: Sequence[float | None] | None = None,
    *,
    choices: Sequence[str] | None = None,
    tie_policy: str = "none",
    min_share: float = 0.0,
    timeout: float | None = None,
) -> WeightedVote:
    """Vote over several voters' answers, each voter's answers weighted by the log-odds of its reliability.

    ``groups[j]`` are voter j's answers, ``reliability[j]`` its estimated accuracy (None → weight 1; no list →
    every voter weighs 1, which is exactly :func:`corl_vl.answers.vote` over the pooled answers). A cluster's
    weighted share is ``Σ_j w_j · #(j's answers in it) / Σ_j w_j · #(j's answers)``, unparseable ones included.
    """
    if tie_policy not in TIE_POLICIES:
        raise CorlError(f"unknown tie_policy {tie_policy!r}; choose from {list(TIE_POLICIES)}")
    pooled = [a for g in groups for a in g]
    clusters = cluster_answers(pooled, choices=choices, timeout=timeout)
    if reliability is None:
        weights = [1.0] * len(groups)
    else:
        if len(reliability) != len(groups):
            raise CorlError(f"weighted vote: {len(reliability)} reliabilities for {len(groups)} voters")
        weights = vote_weights(reliability, max(len(clusters), len(choices or ())))
    home = {spelling: c for c, members in enumerate(clusters) for spelling in members}
    score = [0.0] * len(clusters)
    for w, g in zip(weights, groups):
        for a in g:
            if a is not None and a in home:
                score[home[a]] += w
    denom = sum(w * len(g) for w, g in zip(weights, groups))
    ranked = sorted(range(len(clusters)), key=lambda c: (-score[c], c))
    summary = [(clusters[c][0], len(clusters[c])) for c in ranked]
    shares = [(clusters[c][0], score[c] / denom if denom else 0.0) for c in ranked]
    n_votes = sum(len(c) for c in clusters)
    if not clusters or denom <= 0:
        return WeightedVote(None, 0.0, summary, n_votes, shares)
    top = ranked[0]
    tied = len(ranked) > 1 and math.isclose(score[ranked[1]], score[top], rel_tol=1e-9, abs_tol=1e-12)
    share = score[top] / denom
    if (tie_policy == "none" and tied) or share < min_share:
        return WeightedVote(None, 0.0, summary, n_votes, shares)
    members = clusters[top]
    label = max(dict.fromkeys(members), key=members.count)
    return WeightedVote(label, share, summary, n_votes, shares)


def weighted_peer_rewards(
    answers: Sequence[Answers],
    topology: Topology,
    *,
    reliability: Mapping[str, Sequence[float | None]] | None = None,
    soft: bool = False,
    choices: Choices | None = None,
    tie_policy: str = "none",
    min_share: float = 0.0,
    timeout: float | None = None,
    reliability_by_agent: Sequence[Mapping[str, Sequence[float | None]]] | None = None,
) -> tuple[list[dict[str, list[float]]], list[dict[str, WeightedVote]]]:
    """Co-RL rewards with reliability-weighted supervisors: ``(rewards[i][pid], labels[i][pid])``.

    ``reliability[pid][j]``: agent j's estimated accuracy on that problem (None → uniform weights);
    ``reliability_by_agent[i][pid][j]`` instead: the estimates that weigh agent i's supervisors (leave-one-out:
    made without agent i's answers, so its own answers cannot raise its supervisors' weights). Agent i's own
    answers never vote for its label. ``soft=False``: 1.0 for answers equivalent to the weighted label;
    ``soft=True``: each answer earns the weighted share of supervisor votes for its cluster (ties need no
    breaking). Both give 0.0 everywhere when the winning weighted share is below ``min_share`` (abstain).
    """
    if len(answers) != topology.n_agents:
        raise CorlError(f"got answers from {len(answers)} agents for a topology of {topology.n_agents}")
    check_same_ids(answers)
    choices = choices or {}
    rewards: list[dict[str, list[float]]] = []
    labels: list[dict[str, WeightedVote]] = []
    for i in range(topology.n_agents):
        sups = topology.supervisors(i)
        votes: dict[str, WeightedVote] = {}
        out: dict[str, list[float]] = {}
        for pid, own in answers[i].items():
            table = reliability if reliability_by_agent is None else reliability_by_agent[i]
            rel = None if table is None else [table[pid][j] for j in sups]
            v = weighted_vote(
                [answers[j][pid] for j in sups],
                rel,
                choices=choices.get(pid),
                tie_policy=tie_policy,
                min_share=min_share,
                timeout=timeout,
            )
            votes[pid] = v
            if not soft:
                out[pid] = [
                    1.0
                    if v.label is not None and equivalent(v.label, a, choices.get(pid), timeout=timeout)
                    else 0.0
                    for a in own
                ]
            elif not v.shares or v.shares[0][1] < min_share:
                out[pid] = [0.0] * len(own)
            else:
                out[pid] = [_cluster_share(a, v.shares, choices.get(pid), timeout) for a in own]
        rewards.append(out)
        labels.append(votes)
    return rewards, labels


def _cluster_share(
    answer: str | None,
    shares: Sequence[tuple[str, float]],
    choices: Sequence[str] | None,
    timeout: float | None,
) -> float:
    if answer is None:
        return 0.0
    for rep, share in shares:
        if equivalent(rep, answer, choices, timeout=timeout):
            return share
    return 0.0
