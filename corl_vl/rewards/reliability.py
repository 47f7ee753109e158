"""How reliable is each agent? Estimated from the cohort's answers alone, no labels.

Why: with three or more agents, one weak or collapsed agent's votes poison every label it takes part in. Crowd-
sourcing solved the same problem without gold: a voter who agrees with the others is probably right, and a
voter's weight in the vote should be the log-odds of its accuracy (the Bayes-optimal weighted majority of
independent voters). Two estimators, both over one step's problems:

- :func:`agreement_reliability` — the share of an agent's answers that match the leave-one-out majority (the
  vote of every *other* agent's pooled answers). Cheap, but a poisoned majority poisons it too.
- :func:`dawid_skene` — one-coin Dawid–Skene EM: each agent is right with its own probability ``p_j``; a wrong
  answer falls on any of the problem's other candidate answers. EM alternates the posterior over each problem's
  true answer and the ``p_j`` that explain it, so agreement among *reliable* agents is what counts.

Each agent is one annotator per problem: its K answers enter as its answer *distribution* (shares summing to at
most 1; unparseable answers are wrong for every candidate), so K correlated samples do not count as K
independent witnesses. With K = 1 this is the textbook model. Candidates are the clusters of the pooled answers
under :func:`corl_vl.answers.equivalent` (plus any unnamed option of a multiple-choice problem).

:class:`ReliabilityTracker` smooths the per-step estimates with an exponential moving average, per agent and
optionally per tag (e.g. a problem's skill), and :func:`vote_weights` turns reliabilities into vote weights.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from corl_vl.answers.equivalence import equivalent
from corl_vl.answers.options import parse_options
from corl_vl.answers.voting import cluster_answers
from corl_vl.errors import CorlError

Answers = Mapping[str, Sequence[str | None]]
Choices = Mapping[str, Sequence[str] | None]
WEIGHTINGS = ("uniform", "agreement", "dawid_skene")
#: Weight of a voter judged no better than chance: it still breaks ties among equals, never outvotes anyone.
MIN_WEIGHT = 1e-3
_P_CLIP = 1e-3  # log-odds of 0 or 1 are infinite: one perfect step must not silence everyone else forever


@dataclass(frozen=True)
class ProblemAnswers:
    """One problem's candidate answers and every agent's answer counts over them.

    Attributes:
        candidates: representative spelling of each candidate answer (equivalence clusters, then unnamed options).
        counts: ``counts[j][c]`` = how many of agent j's answers fall in candidate c.
        totals: ``totals[j]`` = agent j's number of answers, unparseable ones included.
    """

    candidates: list[str]
    counts: list[list[int]]
    totals: list[int]

    def shares(self, j: int) -> list[float]:
        """Agent j's answer distribution over the candidates (sums to < 1 when some answers were unparseable)."""
        total = self.totals[j]
        return [c / total if total else 0.0 for c in self.counts[j]]


def cluster_cohort(
    answers: Sequence[Answers], *, choices: Choices | None = None, timeout: float | None = None
) -> dict[str, ProblemAnswers]:
    """Cluster every problem's pooled answers (all agents) and count each agent's answers per cluster."""
    if not answers:
        raise CorlError("reliability: no agents' answers")
    choices = choices or {}
    out: dict[str, ProblemAnswers] = {}
    for pid in answers[0]:
        if any(pid not in a for a in answers):
            raise CorlError(f"reliability: problem {pid!r} is missing from some agent's answers")
        opts = choices.get(pid)
        pooled = [x for a in answers for x in a[pid]]
        clusters = cluster_answers(pooled, choices=opts, timeout=timeout)
        home = {spelling: c for c, members in enumerate(clusters) for spelling in members}
        candidates = [members[0] for members in clusters]
        if opts:  # an option nobody named can still be the answer
            for letter in parse_options(opts).letters:
                if not any(equivalent(letter, rep, opts, timeout=timeout) for rep in candidates):
                    candidates.append(letter)
        counts = [[0] * len(candidates) for _ in answers]
        for j, a in enumerate(answers):
            for x in a[pid]:
                if x is not None and x in home:
                    counts[j][home[x]] += 1
        out[pid] = ProblemAnswers(candidates, counts, [len(a[pid]) for a in answers])
    return out


def _select(problems: Mapping[str, ProblemAnswers], ids: Sequence[str] | None) -> list[ProblemAnswers]:
    return [problems[pid] for pid in (problems if ids is None else ids)]


def agreement_reliability(
    problems: Mapping[str, ProblemAnswers], ids: Sequence[str] | None = None
) -> list[float | None]:
    """Per agent: the share of its answers equal to the leave-one-out majority, over problems that have one.

    The leave-one-out majority of agent j is the plurality candidate of all other agents' pooled answers; a tie
    for the top or no parseable answer gives none, and the problem is skipped for j. None when j has no problem
    with a majority.
    """
    rows = _select(problems, ids)
    if not rows:
        return []
    n = len(rows[0].totals)
    out: list[float | None] = []
    for j in range(n):
        hits = seen = 0.0
        for pa in rows:
            others = [sum(pa.counts[k][c] for k in range(n) if k != j) for c in range(len(pa.candidates))]
            top = max(others, default=0)
            if top == 0 or others.count(top) > 1:
                continue
            hits += pa.shares(j)[others.index(top)]
            seen += 1
        out.append(hits / seen if seen else None)
    return out


@dataclass(frozen=True)
class DawidSkene:
    """The result of one-coin Dawid–Skene EM.

    Attributes:
        accuracy: estimated probability that each agent's answer is right.
        posteriors: per problem id, the posterior probability of each candidate being the true answer.
        iterations: EM iterations run; ``converged``: whether the accuracies moved less than ``tol``.
    """

    accuracy: list[float]
    posteriors: dict[str, list[float]]
    iterations: int
    converged: bool


def dawid_skene(
    problems: Mapping[str, ProblemAnswers],
    ids: Sequence[str] | None = None,
    *,
    max_iterations: int = 1000,
    tol: float = 1e-7,
) -> DawidSkene:
    """One-coin Dawid–Skene EM with a uniform prior over each problem's candidates.

    E-step: ``log P(true = c) = Σ_j f_jc log p_j + (1 − f_jc) log((1 − p_j)/(M − 1)) + const`` with ``f_j`` agent
    j's answer shares and ``M = max(2, #candidates)``. M-step: ``p_j`` = the expected share of j's answers that
    are right. Started from the (soft) majority vote, so EM picks the solution where the majority is mostly
    right — the usual convention, since agreement alone cannot tell a cohort that is always right from one
    that is always wrong together.
    """
    keys = list(problems if ids is None else ids)
    rows = _select(problems, keys)
    if not rows:
        return DawidSkene([], {}, 0, True)
    n = len(rows[0].totals)
    width = max(max(len(pa.candidates) for pa in rows), 1)
    shares = np.zeros((len(rows), n, width))
    valid = np.zeros((len(rows), width), dtype=bool)
    m = np.empty(len(rows))
    for i, pa in enumerate(rows):
        valid[i, : len(pa.candidates)] = True
        m[i] = max(2, len(pa.candidates))
        for j in range(n):
            shares[i, j, : len(pa.candidates)] = pa.shares(j)
    post = np.where(valid, shares.sum(axis=1), 0.0)
    post = _normalise(post, valid)
    acc = np.full(n, 0.5)
    converged, iterations = False, 0
    while iterations < max_iterations:
        iterations += 1
        new = np.einsum("ic,ijc->j", post, shares) / len(rows)  # M-step: every agent answers every problem
        p = np.clip(new, _P_CLIP, 1.0 - _P_CLIP)
        log_right = np.log(p)[None, :, None]
        log_wrong = (np.log1p(-p)[None, :] - np.log(m - 1.0)[:, None])[:, :, None]
        score = (shares * log_right + (1.0 - shares) * log_wrong).sum(axis=1)  # E-step
        score = np.where(valid, score, -np.inf)
        shift = np.where(valid.any(axis=1, keepdims=True), score.max(axis=1, keepdims=True), 0.0)
        post = np.exp(score - shift)  # a problem nobody answered has no candidate: all zeros
        post = _normalise(np.where(valid, post, 0.0), valid)
        delta = float(np.max(np.abs(new - acc)))
        acc = new
        if delta < tol:
            converged = True
            break
    return DawidSkene(
        accuracy=[float(x) for x in acc],
        posteriors={
            pid: [float(x) for x in post[i, : len(rows[i].candidates)]] for i, pid in enumerate(keys)
        },
        iterations=iterations,
        converged=converged,
    )


def _normalise(weights: np.ndarray, valid: np.ndarray) -> np.ndarray:
    total = weights.sum(axis=1, keepdims=True)
    uniform = valid / np.maximum(valid.sum(axis=1, keepdims=True), 1)
    return np.divide(weights, total, out=uniform.astype(float), where=total > 0)


def estimate(
    kind: str, problems: Mapping[str, ProblemAnswers], ids: Sequence[str] | None = None
) -> list[float | None]:
    """This step's per-agent reliability with estimator ``kind`` (``agreement`` or ``dawid_skene``)."""
    if kind == "agreement":
        return agreement_reliability(problems, ids)
    if kind == "dawid_skene":
        rows = _select(problems, ids)
        return list(dawid_skene(problems, ids).accuracy) if rows else []
    raise CorlError(f"unknown reliability estimator {kind!r}; choose from agreement, dawid_skene")


def vote_weights(reliability: Sequence[float | None], n_candidates: int = 2) -> list[float]:
    """Vote weight of each agent: the log-odds that its answer is right rather than one given other answer,
    ``log(p/(1−p)) + log(M−1)`` (Dawid–Skene's posterior weight; M = candidates), floored at :data:`MIN_WEIGHT`.
    An agent without an estimate yet weighs 1."""
    bonus = math.log(max(2, n_candidates) - 1)
    out = []
    for p in reliability:
        if p is None:
            out.append(1.0)
            continue
        p = min(max(float(p), _P_CLIP), 1.0 - _P_CLIP)
        out.append(max(math.log(p / (1.0 - p)) + bonus, MIN_WEIGHT))
    return out


@dataclass
class ReliabilityTracker:
    """Exponential moving average of per-step reliability, per agent and per tag.

    ``decay`` is the weight of the past: ``ema ← decay·ema + (1 − decay)·estimate``; the first estimate is
    taken as is. Tag ``None`` is the agent's overall reliability.
    """

    n_agents: int
    decay: float = 0.5
    values: dict[str, list[float | None]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not 0.0 <= self.decay < 1.0:
            raise CorlError(f"reliability EMA decay must be in [0, 1), got {self.decay}")

    def update(self, estimates: Sequence[float | None], tag: str | None = None) -> list[float | None]:
        if len(estimates) != self.n_agents:
            raise CorlError(f"reliability: {len(estimates)} estimates for {self.n_agents} agents")
        key = _key(tag)
        old = self.values.get(key, [None] * self.n_agents)
        new = [
            o if e is None else (e if o is None else self.decay * o + (1.0 - self.decay) * e)
            for o, e in zip(old, estimates)
        ]
        self.values[key] = new
        return list(new)

    def get(self, tag: str | None = None) -> list[float | None]:
        """The smoothed reliability for ``tag``, falling back per agent to the overall value."""
        overall = self.values.get(_key(None), [None] * self.n_agents)
        tagged = self.values.get(_key(tag), overall)
        return [t if t is not None else o for t, o in zip(tagged, overall)]

    def state_dict(self) -> dict[str, Any]:
        return {"decay": self.decay, "values": {k: list(v) for k, v in self.values.items()}}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.values = {str(k): list(v) for k, v in state.get("values", {}).items()}


def _key(tag: str | None) -> str:
    return "" if tag is None else f"tag:{tag}"
