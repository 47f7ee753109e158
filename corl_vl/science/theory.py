"""Two-outcome GRPO dynamics: why self-reward is self-confirming and Co-RL is not.

The paper's central claim (§5, App. B) is a statement about an ODE, so users can check it with their own numbers
before spending GPU days. Model: on one prompt an agent answers correctly with probability ``p`` (a Bernoulli /
two-way softmax policy with logit θ, ``p = σ(θ)``); every wrong answer is the same wrong answer. Each step it samples
``K`` rollouts, gets reward 1 iff a rollout matches a pseudo-label, and takes a GRPO step with normalised group
advantages ``A_j = (r_j − mean r) / (std r + eps)`` (0 for all-equal groups).

Derivation (full version in docs/theory.md). With ``C`` correct rollouts, ``m = C/K`` and ``s = std r``:

* label = correct answer: ``r_j = y_j`` (``y_j`` = 1 if rollout j is correct) and ``∂θ log π(y_j) = y_j − p``, so the
  group-mean gradient is ``(1/K) Σ_j (y_j − m)(y_j − p) / (s + eps) = m(1 − m) / (s + eps) =: g(C)``;
* label = the wrong answer: ``r_j = 1 − y_j`` gives exactly ``−g(C)``;
* no label (the supervisor's vote is a tie): reward 0 everywhere, no update.

The label comes from *other* draws, independent of the agent's own group, so
``E[dθ/dt] = E_C[g(C)] · (P(label correct) − P(label wrong))`` and, with ``dp/dt = p(1 − p) dθ/dt`` (time in units
of the learning rate)::

    dp/dt = q_K(p) · φ_K(s),   q_K(p) = p(1 − p) · E_{C~Bin(K,p)}[g(C)],
                               φ_K(s) = P(Bin(K,s) > K/2) − P(Bin(K,s) < K/2)

where ``s`` is the label source's accuracy. Ties (even K, C = K/2) give no label, the library's default tie policy.
Nothing is tuned: ``eps`` and the std convention are GRPO's own (``eps → 0`` by default; population std; Bessel's
correction only rescales time when eps = 0). Both functions are polynomials in p, evaluated exactly from the
binomial distribution. At p ∈ {0, 1} ``q_K = 0``: the boundaries are fixed, and near them ``q_K ∝ p²`` (resp.
``(1−p)²``), so trajectories approach the corners like 1/t — the integrator stops within ``tol`` of a fixed point.

Flows (agent i is supervised by ``supervisors[i]``): self-reward ``supervisors[i] = i``; two-agent Co-RL is the ring
with n = 2; the N-agent ring supervises agent i by agent (i + 1) mod n, the library's ring convention.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
from scipy.integrate import quad, solve_ivp
from scipy.special import comb

from corl_vl.errors import CorlError

ArrayLike = float | Sequence[float] | np.ndarray


@lru_cache(maxsize=64)
def _weights(k: int, eps: float, unbiased_std: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Binomial coefficients, per-C mean gradient g(C) and majority sign for K draws (cached: the ODE calls often)."""
    if k < 1:
        raise CorlError(f"theory: K must be a positive integer, got {k}")
    if eps < 0:
        raise CorlError(f"theory: eps must be ≥ 0, got {eps}")
    c = np.arange(k + 1)
    m = c / k
    var = m * (1.0 - m)
    std = np.sqrt(var * (k / (k - 1) if unbiased_std and k > 1 else 1.0))
    denom = std + eps
    g = np.divide(var, denom, out=np.zeros_like(var), where=denom > 0)  # C ∈ {0, K}: all-equal group → 0
    sign = np.sign(c - k / 2.0)  # tie (C = K/2) → 0: no label
    return comb(k, c), g, sign


def _pmf(p: np.ndarray, k: int) -> np.ndarray:
    """Binomial pmf over C = 0..K for every p (last axis = C)."""
    coef = _weights(k, 0.0, False)[0]
    c = np.arange(k + 1)
    p = np.clip(np.asarray(p, dtype=float), 0.0, 1.0)[..., None]
    return coef * p**c * (1.0 - p) ** (k - c)


def phi(s: ArrayLike, k: int) -> np.ndarray | float:
    """φ_K(s) = P(majority of K draws at accuracy s is correct) − P(majority wrong); ties count as no label."""
    out = _pmf(np.asarray(s, dtype=float), k) @ _weights(k, 0.0, False)[2]
    return float(out) if np.ndim(out) == 0 else out


def q(p: ArrayLike, k: int, eps: float = 0.0, unbiased_std: bool = False) -> np.ndarray | float:
    """q_K(p) = p(1−p)·E[g(C)]: the speed of GRPO's update towards a label that is surely correct (> 0 inside)."""
    p_arr = np.clip(np.asarray(p, dtype=float), 0.0, 1.0)
    out = p_arr * (1.0 - p_arr) * (_pmf(p_arr, k) @ _weights(k, float(eps), unbiased_std)[1])
    return float(out) if np.ndim(out) == 0 else out


def potential(p: float, k: int, eps: float = 0.0, unbiased_std: bool = False) -> float:
    """F_K(p) = ∫_{1/2}^{p} φ_K/q_K: F_K(pA) − F_K(pB) is conserved by two-agent Co-RL.

    Why: dF(pA)/dt = φ(pA)/q(pA) · q(pA) φ(pB) = φ(pA) φ(pB), which is symmetric in A and B. F_K diverges at 0 and
    1 (q_K ∝ p² there), so p must lie strictly inside (0, 1).
    """
    if not 0.0 < p < 1.0:
        raise CorlError(f"theory: F_K is defined only for 0 < p < 1, got {p}")
    if k == 1:
        raise CorlError("theory: F_K needs K ≥ 2 (with K = 1 every group is all-equal and q_1 = 0)")
    val, _ = quad(
        lambda u: phi(u, k) / q(u, k, eps, unbiased_std), 0.5, p, epsabs=1e-13, epsrel=1e-11, limit=200
    )
    return float(val)


PEER_REWARDS = ("hard", "soft")
ADVANTAGES = ("grpo", "dr_grpo")


@lru_cache(maxsize=64)
def update_matrix(
    k: int, reward: str = "hard", advantage: str = "grpo", eps: float = 0.0, unbiased_std: bool = False
) -> np.ndarray:
    """``H[C, C']``: the group-mean θ-update when the agent has C correct of K rollouts and its supervisor C' of K.

    Two outcomes make every reward affine in correctness, ``r_j = a + b·y_j``: a hard label gives ``b = ±1``
    (sign of the supervisor's majority, 0 on a tie), the soft reward (share of the supervisor's votes for the
    rollout's answer) gives ``b = 2S − 1`` with ``S = C'/K``. The update is then ``b·m(1 − m)`` with centred
    advantages (``dr_grpo``) and ``b·m(1 − m)/(|b|·std + eps)`` with GRPO's std scaling — so with ``eps → 0``
    soft and hard rewards give *identical* dynamics: normalisation keeps only the sign of ``2S − 1``.
    """
    if reward not in PEER_REWARDS or advantage not in ADVANTAGES:
        raise CorlError(f"theory: reward must be in {PEER_REWARDS} and advantage in {ADVANTAGES}")
    _, _, sign = _weights(k, 0.0, False)
    share = np.arange(k + 1) / k
    b = sign if reward == "hard" else 2.0 * share - 1.0
    return _update(k, b, advantage, eps, unbiased_std)


def _update(k: int, b: np.ndarray, advantage: str, eps: float, unbiased_std: bool) -> np.ndarray:
    """``H[C, i] = b_i·m(1 − m)`` (centred) or ``b_i·m(1 − m)/(|b_i|·std + eps)`` (std-scaled), m = C/K."""
    m = np.arange(k + 1) / k
    var = (m * (1.0 - m))[:, None]
    if advantage == "dr_grpo":
        return var * b[None, :]
    std = np.sqrt(var * (k / (k - 1) if unbiased_std and k > 1 else 1.0))
    denom = np.abs(b)[None, :] * std + eps
    return np.divide(var * b[None, :], denom, out=np.zeros((k + 1, b.size)), where=denom > 0)


def drift(
    p: ArrayLike,
    s: ArrayLike,
    k: int,
    *,
    reward: str = "hard",
    advantage: str = "grpo",
    eps: float = 0.0,
    unbiased_std: bool = False,
) -> np.ndarray | float:
    """dp/dt of an agent at accuracy p supervised by one agent at accuracy s (elementwise over arrays).

    ``hard`` + ``grpo`` equals ``q_K(p)·φ_K(s)``; ``soft`` + ``dr_grpo`` is ``p(1−p)·E[m(1−m)]·(2s − 1)``.
    """
    p_arr = np.clip(np.asarray(p, dtype=float), 0.0, 1.0)
    h = update_matrix(k, reward, advantage, float(eps), unbiased_std)
    out = p_arr * (1.0 - p_arr) * np.einsum("...c,cd,...d->...", _pmf(p_arr, k), h, _pmf(np.asarray(s), k))
    return float(out) if np.ndim(out) == 0 else out


def self_supervisors(n: int) -> list[int]:
    """Self-reward: every agent votes its own label."""
    return list(range(n))


def ring_supervisors(n: int) -> list[int]:
    """Ring: agent i is supervised by agent (i + 1) mod n (n = 2 is mutual Co-RL)."""
    return [(i + 1) % n for i in range(n)]


def flow(
    p: ArrayLike,
    supervisors: Sequence[int],
    k: int,
    eps: float = 0.0,
    unbiased_std: bool = False,
    reward: str = "hard",
    advantage: str = "grpo",
) -> np.ndarray:
    """dp_i/dt = q_K(p_i) · φ_K(p_{supervisors[i]}) (hard labels, GRPO), else :func:`drift`."""
    p_arr = np.clip(np.asarray(p, dtype=float), 0.0, 1.0)
    if reward == "hard" and advantage == "grpo":
        return np.asarray(q(p_arr, k, eps, unbiased_std)) * np.asarray(phi(p_arr[list(supervisors)], k))
    return np.asarray(
        drift(
            p_arr,
            p_arr[list(supervisors)],
            k,
            reward=reward,
            advantage=advantage,
            eps=eps,
            unbiased_std=unbiased_std,
        )
    )


@dataclass(frozen=True)
class Trajectory:
    """An integrated trajectory: ``t`` (T,), ``p`` (n, T); ``limit`` is the fixed point reached within tol, if any."""

    t: np.ndarray
    p: np.ndarray
    limit: tuple[float, ...] | None

    @property
    def final(self) -> tuple[float, ...]:
        """The end state: the fixed point when one was reached (the t → ∞ value), else the state at the horizon."""
        return self.limit if self.limit is not None else tuple(float(x) for x in self.p[:, -1])


def _check_p(p0: Sequence[float]) -> np.ndarray:
    arr = np.asarray(p0, dtype=float)
    if arr.ndim != 1 or arr.size == 0:
        raise CorlError("theory: give one accuracy per agent")
    for i, x in enumerate(arr):
        if not 0.0 <= x <= 1.0:
            raise CorlError(f"theory: accuracy of agent {i} must be in [0, 1], got {x}")
    return arr


def integrate(
    p0: Sequence[float],
    supervisors: Sequence[int],
    k: int = 8,
    *,
    eps: float = 0.0,
    unbiased_std: bool = False,
    reward: str = "hard",
    advantage: str = "grpo",
    horizon: float = 1e12,
    tol: float = 1e-6,
    rtol: float = 1e-9,
    atol: float = 1e-12,
) -> Trajectory:
    """Integrate the flow from ``p0`` with scipy's adaptive RK45 until ``horizon`` or within ``tol`` of a fixed point.

    A state is a fixed point iff every agent has q_K(p_i) = 0 (p_i ∈ {0, 1}) or φ_K(p_sup(i)) = 0 (p_sup(i) = ½).
    The stop event fires only when the trajectory *enters* that neighbourhood, so a start next to an unstable
    fixed point (e.g. (1, 0)) is not mistaken for the end. Time is in units of the learning rate.
    """
    p_start = _check_p(p0)
    sup = [int(s) for s in supervisors]
    if len(sup) != p_start.size or any(not 0 <= s < p_start.size for s in sup):
        raise CorlError(f"theory: supervisors {sup} do not index {p_start.size} agents")
    if tol <= 0 or rtol <= 0 or atol <= 0 or horizon <= 0:
        raise CorlError("theory: horizon, tol, rtol and atol must be > 0")

    def distance(p: np.ndarray) -> float:
        p = np.clip(p, 0.0, 1.0)
        to_edge = np.minimum(p, 1.0 - p)
        to_half = np.abs(p[sup] - 0.5)
        return float(np.max(np.minimum(to_edge, to_half)))

    def near_fixed_point(_t: float, p: np.ndarray) -> float:
        return distance(p) - tol

    near_fixed_point.terminal = True  # type: ignore[attr-defined]
    near_fixed_point.direction = -1  # type: ignore[attr-defined]
    sol = solve_ivp(
        lambda _t, p: flow(p, sup, k, eps, unbiased_std, reward, advantage),
        (0.0, float(horizon)),
        p_start,
        method="RK45",
        rtol=rtol,
        atol=atol,
        events=near_fixed_point,
    )
    if not sol.success:
        raise CorlError(f"theory: integration failed: {sol.message}")
    end = np.clip(sol.y[:, -1], 0.0, 1.0)
    limit = None
    if sol.status == 1 or distance(end) <= 2.0 * tol:
        # Snap each coordinate to the equilibrium value it is within tol of (0, 1, or ½ on a separatrix); a
        # coordinate held still only by its supervisor sitting at ½ keeps its value. The slack absorbs the
        # event's root-finding error (the event stops at distance ≈ tol, not strictly below it).
        near = 2.0 * tol
        snapped = np.where(np.abs(end - 0.5) <= near, 0.5, end)
        snapped = np.where(np.minimum(end, 1.0 - end) <= near, np.round(end), snapped)
        limit = tuple(float(v) for v in snapped)
    return Trajectory(t=sol.t, p=np.clip(sol.y, 0.0, 1.0), limit=limit)


def final_accuracies(
    prompts: Sequence[Sequence[float]], supervisors: Sequence[int], k: int = 8, **kwargs: float
) -> list[float]:
    """Per-agent final accuracy averaged over prompts (each prompt row = one accuracy per agent)."""
    finals = np.array([integrate(row, supervisors, k, **kwargs).final for row in prompts])  # type: ignore[arg-type]
    return [float(x) for x in finals.mean(axis=0)]


#: The paper's §5 example: complementary expertise, 0.55 mean accuracy each.
COMPLEMENTARY = ((0.9, 0.2), (0.2, 0.9))
#: Three agents, each strong on one prompt type (0.9) and weak elsewhere (0.4): 0.567 mean accuracy each.
RING3 = ((0.9, 0.4, 0.4), (0.4, 0.9, 0.4), (0.4, 0.4, 0.9))


def compare(prompts: Sequence[Sequence[float]], k: int = 8, **kwargs: float) -> dict[str, list[float]]:
    """Final per-agent accuracies under self-reward and under Co-RL (ring; mutual for two agents)."""
    n = len(prompts[0])
    if any(len(row) != n for row in prompts):
        raise CorlError("theory: every prompt needs one accuracy per agent")
    return {
        "self_reward": final_accuracies(prompts, self_supervisors(n), k, **kwargs),
        "co_rl": final_accuracies(prompts, ring_supervisors(n), k, **kwargs),
    }


def plot_phase_portrait(
    path: str | Path, k: int = 8, *, eps: float = 0.0, unbiased_std: bool = False
) -> Path:
    """Draw the two-agent Co-RL flow in the pA–pB square with the separatrix pA + pB = 1 and a few trajectories.

    Written to a temporary file and renamed, so a failed render never leaves a half-written image.
    """
    # lazy: matplotlib
    import matplotlib

    matplotlib.use("Agg")
    # lazy: matplotlib
    import matplotlib.pyplot as plt

    out = Path(path)
    if not out.parent.is_dir():
        raise CorlError(f"{out}: folder {out.parent} does not exist")
    grid = np.linspace(0.0, 1.0, 41)
    pa, pb = np.meshgrid(grid, grid)
    ua = np.asarray(q(pa, k, eps, unbiased_std)) * np.asarray(phi(pb, k))
    ub = np.asarray(q(pb, k, eps, unbiased_std)) * np.asarray(phi(pa, k))
    fig, ax = plt.subplots(figsize=(6, 6))
    try:
        ax.streamplot(pa, pb, ua, ub, color=np.hypot(ua, ub), cmap="Greys", density=1.2, linewidth=0.7)
        ax.plot([0, 1], [1, 0], "r--", lw=1.5, label="separatrix $p_A + p_B = 1$")
        starts = [
            (0.9, 0.2),
            (0.2, 0.9),
            (0.6, 0.3),
            (0.3, 0.6),
            (0.7, 0.4),
            (0.4, 0.7),
            (0.15, 0.5),
            (0.5, 0.15),
        ]
        for start in starts:
            traj = integrate(start, ring_supervisors(2), k, eps=eps, unbiased_std=unbiased_std, tol=1e-3)
            colour = "tab:green" if sum(start) > 1 else "tab:blue"
            ax.plot(traj.p[0], traj.p[1], color=colour, lw=2)
            ax.plot(*start, "o", color=colour, ms=5)
        ax.plot([1, 0], [1, 0], "ko", ms=8, label="stable: (1,1), (0,0)")
        ax.plot([0.5], [0.5], "o", mfc="white", mec="k", ms=8, label="saddle (½,½)")
        ax.set(xlim=(0, 1), ylim=(0, 1), xlabel="$p_A$", ylabel="$p_B$", aspect="equal")
        ax.set_title(f"Two-agent Co-RL, K = {k}: $\\dot p_A = q_K(p_A)\\,\\varphi_K(p_B)$")
        ax.legend(loc="upper left", fontsize=8, framealpha=0.9)
        fmt = out.suffix.lstrip(".").lower() or "png"
        if fmt not in fig.canvas.get_supported_filetypes():
            raise CorlError(f"{out}: unsupported image format {fmt!r} (use .png, .pdf or .svg)")
        tmp = out.with_name(f".{out.name}.tmp")
        fig.savefig(tmp, format=fmt, dpi=120, bbox_inches="tight")
        tmp.replace(out)
    finally:
        plt.close(fig)
    return out
