"""Soft peer rewards and weighted pooled supervision in the two-outcome theory, checked against simulation of
the library's own reward and advantage code (corl_vl.rewards.peer, corl_vl.train.grpo)."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from corl_vl.rewards.peer import weighted_peer_rewards
from corl_vl.rewards.reliability import vote_weights
from corl_vl.rewards.topology import from_edges
from corl_vl.science import theory
from corl_vl.science.cohort_theory import COLLAPSED, all_peers, pooled_drift, ring, simulate
from corl_vl.train.grpo import STD_EPS, group_advantages


def simulated_update(
    p: float, sources: list[float], reliability: list[float] | None, k: int, reward: str, advantage: str
) -> tuple[float, float]:
    """Mean and standard error of the θ-update (1/K) Σ_j A_j (y_j − p) over 4000 simulated groups, where the
    answers are "1" (right) or "2" (wrong) and rewards/advantages come from the trainer's functions."""
    rng = random.Random(0)
    n = 4000
    agents = [{} for _ in range(1 + len(sources))]
    for g in range(n):
        for a, acc in enumerate([p, *sources]):
            agents[a][f"g{g}"] = ["1" if rng.random() < acc else "2" for _ in range(k)]
    sups = range(1, len(sources) + 1)
    topo = from_edges(len(agents), [*((j, 0) for j in sups), *((0, j) for j in sups)])
    rel = None if reliability is None else {f"g{g}": [None, *reliability] for g in range(n)}
    rewards, _ = weighted_peer_rewards(agents, topo, reliability=rel, soft=reward == "soft")
    r = torch.tensor([rewards[0][f"g{g}"] for g in range(n)], dtype=torch.float64)
    adv = group_advantages(r, scale=advantage)
    y = torch.tensor([[a == "1" for a in agents[0][f"g{g}"]] for g in range(n)], dtype=torch.float64)
    per_group = (adv * (y - p)).mean(dim=1)
    return float(per_group.mean()), float(per_group.std() / n**0.5)


@pytest.mark.parametrize("reward", ["hard", "soft"])
@pytest.mark.parametrize("advantage", ["grpo", "dr_grpo"])
@pytest.mark.parametrize("reliability", [None, [0.7, 0.2]])
def test_pooled_drift_matches_simulation_of_the_trainer(reward, advantage, reliability) -> None:
    p, sources, k = 0.4, [0.7, 0.2], 4
    weights = [1.0, 1.0] if reliability is None else vote_weights(reliability)
    expected = pooled_drift(
        p, sources, weights, k, reward=reward, advantage=advantage, eps=STD_EPS, unbiased_std=True
    ) / (p * (1 - p))
    mean, se = simulated_update(p, sources, reliability, k, reward, advantage)
    assert abs(mean - expected) < 4 * se + 1e-3, (mean, expected, se)


def test_one_supervisor_reduces_to_the_two_agent_formulas() -> None:
    for p, s in [(0.3, 0.7), (0.6, 0.45), (0.9, 0.2)]:
        hard = theory.q(p, 8) * theory.phi(s, 8)
        assert theory.drift(p, s, 8) == pytest.approx(hard, abs=1e-15)
        assert pooled_drift(p, [s], [1.0], 8) == pytest.approx(hard, abs=1e-15)
        # std-normalised GRPO with eps → 0 keeps only the sign of 2S − 1: soft ≡ hard
        assert theory.drift(p, s, 8, reward="soft") == pytest.approx(hard, abs=1e-15)
        # centred advantages: soft = p(1−p)·E[m(1−m)]·(2s − 1) with E[m(1−m)] = p(1−p)(K−1)/K
        soft_dr = theory.drift(p, s, 8, reward="soft", advantage="dr_grpo")
        assert soft_dr == pytest.approx(p * (1 - p) * p * (1 - p) * 7 / 8 * (2 * s - 1), abs=1e-15)


def test_soft_rewards_keep_the_two_agent_separatrix_and_slow_the_escape() -> None:
    # dr_grpo: dpA/dt = c(pA)·(2pB − 1) vs c(pA)·φ_K(pB); both odd about ½, so pA + pB = 1 stays the separatrix
    for reward in ("hard", "soft"):
        up = theory.integrate((0.62, 0.40), [1, 0], 8, reward=reward, advantage="dr_grpo", tol=1e-3)
        down = theory.integrate((0.58, 0.40), [1, 0], 8, reward=reward, advantage="dr_grpo", tol=1e-3)
        assert up.final == (1.0, 1.0) and down.final == (0.0, 0.0)
    # the soft reward is never faster (|2s − 1| ≤ |φ_K(s)|): time until both agents pass 0.9, from (0.6, 0.45),
    # is 22.6 (hard) vs 38.0 (soft) learning-rate units with dr_grpo, and identical with grpo
    t = {(r, a): time_to(0.9, (0.6, 0.45), r, a) for r in ("hard", "soft") for a in ("grpo", "dr_grpo")}
    assert t["soft", "dr_grpo"] == pytest.approx(38.0, abs=0.5) and t["hard", "dr_grpo"] == pytest.approx(
        22.6, abs=0.5
    )
    assert t["soft", "grpo"] == pytest.approx(t["hard", "grpo"], rel=1e-6)


def time_to(level: float, start: tuple[float, float], reward: str, advantage: str) -> float:
    traj = theory.integrate(start, [1, 0], 8, reward=reward, advantage=advantage, tol=1e-4)
    above = traj.p.min(axis=0) > level
    assert above.any()
    return float(traj.t[int(np.argmax(above))])


def test_collapsed_peer_sinks_uniform_pooling_but_not_reliability_weights() -> None:
    # Two complementary agents (0.9 / 0.2) and one that is always wrong: pooled uniformly, each good agent's
    # label on its weak type has correct share (0.9 + 0) / 2 < ½, and on its strong type (0.2 + 0) / 2.
    uniform = simulate(COLLAPSED, all_peers(3), 8, weighting="uniform").final
    weighted = simulate(COLLAPSED, all_peers(3), 8, weighting="dawid_skene").final
    fooled = simulate(COLLAPSED, all_peers(3), 8, weighting="agreement").final
    assert np.all(uniform[:, :2] < 0.01) and np.all(fooled[:, :2] < 0.01)
    assert np.all(weighted[:, :2] > 0.99)
    assert np.all(simulate(COLLAPSED, ring(3), 8).final[:, :2] < 0.01)
    # the collapsed agent stays at 0: every group of an always-wrong agent is all-equal, no gradient
    assert np.all(weighted[:, 2] == 0.0)


def test_theory_cli_compares_weightings_for_a_cohort(capsys) -> None:
    import json

    from corl_vl.cli import main

    assert main(["theory", "--example", "collapsed", "--json"]) == 0
    final = json.loads(capsys.readouterr().out)["final"]
    assert np.mean(final["uniform"]) < 0.01 and np.mean(np.asarray(final["dawid_skene"])[:, :2]) > 0.99
    assert main(["theory", "--cohort", "0.9,0.2;0.5"]) == 2
    assert "equally many accuracies" in capsys.readouterr().err
