"""Two-outcome dynamics of an N-agent cohort with pooled, reliability-weighted supervisors and soft rewards.

Extends :mod:`corl_vl.science.theory` (one agent ← one supervisor on one prompt) to what the trainer does with
``topology: all_peers`` and ``topology.weighting``: agent i's label on a prompt type pools the K draws of each of
its supervisors, each draw counting ``w_j``. With ``S`` the weighted share of correct votes, a hard label is
correct when ``S > ½`` (none on a tie) and the soft reward pays ``S`` to a correct rollout and ``1 − S`` to the
(single) wrong answer; :func:`corl_vl.science.theory.update_matrix` gives the GRPO update for each ``S``.

Weights are the library's own :func:`corl_vl.rewards.reliability.vote_weights` of the *population* value each
estimator targets, computed from the state (prompt types × agents): ``dawid_skene`` → each agent's accuracy
(one-coin Dawid–Skene recovers it exactly when errors are independent given the truth, see
tests/test_reliability.py), ``agreement`` → the probability its draw agrees with the leave-one-out pooled
majority of the others (ties skipped), ``uniform`` → 1. ``per_type`` uses each prompt type's values (the
``topology.reliability_tag`` option) instead of the mean over types. Time is in units of the learning rate.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.integrate import solve_ivp

from corl_vl.errors import CorlError
from corl_vl.rewards.reliability import vote_weights
from corl_vl.science.theory import ADVANTAGES, PEER_REWARDS, _pmf, _update

WEIGHTINGS = ("uniform", "agreement", "dawid_skene")
#: Two complementary agents (0.9 on their own prompt type, 0.2 on the other's) and a collapsed third one that
#: always gives the same wrong answer — the 3-agent toy of benchmarks/science/three_agents.py.
COLLAPSED = ((0.9, 0.2, 0.0), (0.2, 0.9, 0.0))
#: Most outcomes one pooled label may enumerate. Equal weights merge to (supervisors·K + 1) values; distinct
#: weights give up to (K + 1)^supervisors, and above this bound one integration takes minutes (or all memory).
MAX_OUTCOMES = 10_000


def outcome_bound(n_supervisors: int, k: int) -> int:
    """Worst-case support size of a label pooling ``n_supervisors`` agents with distinct weights."""
    return (k + 1) ** n_supervisors


def check_size(n_supervisors: int, k: int) -> None:
    """Refuse, in one line, a pooled label whose outcomes would not fit :data:`MAX_OUTCOMES`."""
    if outcome_bound(n_supervisors, k) > MAX_OUTCOMES:
        most = max((m for m in range(1, 64) if outcome_bound(m, k) <= MAX_OUTCOMES), default=0)
        raise CorlError(
            f"theory: a label pooling {n_supervisors} weighted supervisors with K = {k} has up to "
            f"(K+1)^{n_supervisors} = {outcome_bound(n_supervisors, k):.3g} outcomes, more than the "
            f"{MAX_OUTCOMES:,} this exact computation enumerates; use --topology ring, fewer agents "
            f"(at most {most} supervisors per label at this K) or a smaller --k"
        )


def pooled_share(sources: Sequence[float], weights: Sequence[float], k: int) -> tuple[np.ndarray, np.ndarray]:
    """Support and probabilities of ``S = Σ_j w_j C_j / (K Σ_j w_j)`` with independent ``C_j ~ Bin(K, s_j)``.

    Equal sums are merged after each supervisor (exactly: float equality), so equal weights stay at
    (supervisors·K + 1) values; a support that would exceed :data:`MAX_OUTCOMES` is refused.
    """
    values, probs = np.zeros(1), np.ones(1)
    for s, w in zip(sources, weights, strict=True):
        if values.size * (k + 1) > MAX_OUTCOMES:
            check_size(len(sources), k)
        values = (values[:, None] + w * np.arange(k + 1)[None, :]).ravel()
        probs = (probs[:, None] * _pmf(np.asarray(s, dtype=float), k)[None, :]).ravel()
        values, where = np.unique(values, return_inverse=True)
        probs = np.bincount(where.ravel(), weights=probs, minlength=values.size)
    return values / (k * float(sum(weights))), probs


def pooled_drift(
    p: float,
    sources: Sequence[float],
    weights: Sequence[float],
    k: int,
    *,
    reward: str = "hard",
    advantage: str = "grpo",
    eps: float = 0.0,
    unbiased_std: bool = False,
) -> float:
    """dp/dt of an agent at accuracy ``p`` whose label pools ``sources`` with ``weights``."""
    if reward not in PEER_REWARDS or advantage not in ADVANTAGES:
        raise CorlError(f"theory: reward must be in {PEER_REWARDS} and advantage in {ADVANTAGES}")
    share, prob = pooled_share(sources, weights, k)
    b = 2.0 * share - 1.0
    if reward == "hard":
        b = np.where(np.isclose(b, 0.0, atol=1e-12), 0.0, np.sign(b))
    h = _update(k, b, advantage, eps, unbiased_std)
    p = float(np.clip(p, 0.0, 1.0))
    return float(p * (1.0 - p) * (_pmf(np.asarray(p), k) @ h @ prob))


def agreement_rates(state: np.ndarray, k: int) -> np.ndarray:
    """``[type, j]``: P(agent j's draw agrees with the others' pooled majority) and P(that majority exists)."""
    types, n = state.shape
    agree, decided = np.zeros((types, n)), np.zeros((types, n))
    for t in range(types):
        for j in range(n):
            others = [state[t, i] for i in range(n) if i != j]
            share, prob = pooled_share(others, [1.0] * len(others), k)
            right, wrong = prob[share > 0.5 + 1e-12].sum(), prob[share < 0.5 - 1e-12].sum()
            agree[t, j] = state[t, j] * right + (1.0 - state[t, j]) * wrong
            decided[t, j] = right + wrong
    return np.stack([agree, decided])


def weights_for(state: np.ndarray, weighting: str, k: int, per_type: bool = False) -> np.ndarray:
    """``[type, j]``: the vote weight of agent j on prompt type t under ``weighting``."""
    if weighting not in WEIGHTINGS:
        raise CorlError(f"theory: weighting must be one of {', '.join(WEIGHTINGS)}, got {weighting!r}")
    if weighting == "uniform":
        return np.ones_like(state)
    if weighting == "dawid_skene":
        rel = state if per_type else np.broadcast_to(state.mean(axis=0), state.shape)
    else:
        agree, decided = agreement_rates(state, k)
        if per_type:
            rel = np.divide(agree, decided, out=np.full_like(agree, 0.5), where=decided > 0)
        else:
            total = decided.sum(axis=0)
            mean = np.divide(agree.sum(axis=0), total, out=np.full(state.shape[1], 0.5), where=total > 0)
            rel = np.broadcast_to(mean, state.shape)
    return np.array([vote_weights(list(row)) for row in rel])


def cohort_flow(
    state: np.ndarray,
    supervisors: Sequence[Sequence[int]],
    k: int,
    *,
    weighting: str = "uniform",
    per_type: bool = False,
    reward: str = "hard",
    advantage: str = "grpo",
    eps: float = 0.0,
    unbiased_std: bool = False,
) -> np.ndarray:
    """``d state / dt`` for a state of shape (prompt types, agents)."""
    state = np.clip(state, 0.0, 1.0)
    w = weights_for(state, weighting, k, per_type)
    out = np.zeros_like(state)
    for t in range(state.shape[0]):
        for i, sups in enumerate(supervisors):
            out[t, i] = pooled_drift(
                state[t, i],
                [state[t, j] for j in sups],
                [w[t, j] for j in sups],
                k,
                reward=reward,
                advantage=advantage,
                eps=eps,
                unbiased_std=unbiased_std,
            )
    return out


@dataclass(frozen=True)
class CohortTrajectory:
    """``t`` (T,) and ``state`` (T, prompt types, agents)."""

    t: np.ndarray
    state: np.ndarray

    @property
    def final(self) -> np.ndarray:
        return self.state[-1]


def simulate(
    start: Sequence[Sequence[float]],
    supervisors: Sequence[Sequence[int]],
    k: int = 8,
    *,
    horizon: float = 200.0,
    points: int = 41,
    **options: object,
) -> CohortTrajectory:
    """Integrate :func:`cohort_flow` from ``start`` (rows: prompt types, columns: agents) up to ``horizon``."""
    state0 = np.asarray(start, dtype=float)
    if state0.ndim != 2 or not ((state0 >= 0) & (state0 <= 1)).all():
        raise CorlError("theory: the cohort start must be rows of accuracies in [0, 1], one per agent")
    if len(supervisors) != state0.shape[1]:
        raise CorlError(f"theory: {len(supervisors)} supervisor lists for {state0.shape[1]} agents")
    shape = state0.shape

    def rhs(_t: float, flat: np.ndarray) -> np.ndarray:
        return cohort_flow(flat.reshape(shape), supervisors, k, **options).ravel()  # type: ignore[arg-type]

    t_eval = np.linspace(0.0, horizon, points)
    sol = solve_ivp(rhs, (0.0, horizon), state0.ravel(), t_eval=t_eval, rtol=1e-6, atol=1e-9)
    if not sol.success:
        raise CorlError(f"theory: integration failed: {sol.message}")
    return CohortTrajectory(sol.t, np.clip(sol.y.T.reshape(len(sol.t), *shape), 0.0, 1.0))


def all_peers(n: int) -> list[list[int]]:
    return [[j for j in range(n) if j != i] for i in range(n)]


def ring(n: int) -> list[list[int]]:
    return [[(i + 1) % n] for i in range(n)]
