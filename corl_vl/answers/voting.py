"""Majority vote over answers clustered by mathematical equivalence, with an explicit tie policy.

The public release counts raw strings (``1/2`` and ``0.5`` split the vote) and lets the first-seen answer
win a tie. Here identical strings are grouped first (free), then groups are merged greedily into clusters
whose first member is the representative: an answer joins the first cluster whose representative it is
equivalent to (representative as gold). A tie for the top gives no label by default (``tie_policy="none"``);
``"first"`` reproduces the release (the cluster seen first wins).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from corl_vl.answers.equivalence import equivalent
from corl_vl.errors import CorlError

# what a tie for the top answer gives (topology.ties is validated against these names)
TIE_POLICIES = {"none": "no label", "first": "the first-seen of the tied answers"}


@dataclass(frozen=True)
class Vote:
    """The result of one vote.

    Attributes:
        label: the winning answer (the most frequent spelling inside the winning cluster), or None when no
            answer was given, the top clusters tie under ``tie_policy="none"``, or the share is below
            ``min_share``.
        share: votes for the label / number of ALL answers, unparseable ones included; 0 when no label.
        clusters: (representative, votes) for every cluster, most votes first, then first seen.
        n_votes: answers that voted (not None).
    """

    label: str | None
    share: float
    clusters: list[tuple[str, int]] = field(default_factory=list)
    n_votes: int = 0


def cluster_answers(
    answers: Sequence[str | None], *, choices: Sequence[str] | None = None, timeout: float | None = None
) -> list[list[str]]:
    """Clusters of equivalent answers in first-seen order; each is the list of its members (with repeats)."""
    spellings: dict[str, int] = {}
    for a in answers:
        if a is not None and a.strip():
            spellings[a] = spellings.get(a, 0) + 1
    clusters: list[list[str]] = []
    for spelling, count in spellings.items():
        home = next((c for c in clusters if equivalent(c[0], spelling, choices, timeout=timeout)), None)
        if home is None:
            clusters.append([spelling] * count)
        else:
            home.extend([spelling] * count)
    return clusters


def vote(
    answers: Sequence[str | None],
    *,
    choices: Sequence[str] | None = None,
    tie_policy: str = "none",
    min_share: float = 0.0,
    timeout: float | None = None,
) -> Vote:
    """Majority answer among ``answers`` (None = no answer, counted in the share's denominator)."""
    if tie_policy not in TIE_POLICIES:
        raise CorlError(f"unknown tie_policy {tie_policy!r}; choose from {list(TIE_POLICIES)}")
    clusters = cluster_answers(answers, choices=choices, timeout=timeout)
    n_votes = sum(len(c) for c in clusters)
    ranked = sorted(range(len(clusters)), key=lambda i: (-len(clusters[i]), i))  # stable: first seen wins
    summary = [(clusters[i][0], len(clusters[i])) for i in ranked]
    if not clusters:
        return Vote(None, 0.0, summary, 0)
    top = clusters[ranked[0]]
    if tie_policy == "none" and len(ranked) > 1 and len(clusters[ranked[1]]) == len(top):
        return Vote(None, 0.0, summary, n_votes)
    share = len(top) / len(answers)
    if share < min_share:
        return Vote(None, 0.0, summary, n_votes)
    label = max(dict.fromkeys(top), key=top.count)  # most frequent spelling; first seen on ties
    return Vote(label, share, summary, n_votes)
