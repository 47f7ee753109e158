"""Two-outcome GRPO dynamics: φ_K, q_K against brute force, the conserved quantity, basins, examples, CLI."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest

from corl_vl.cli import main
from corl_vl.errors import CorlError
from corl_vl.science import theory


def _group_grad(outcomes: tuple[int, ...], p: float, label_correct: bool, eps: float, ddof: int) -> float:
    """Literal GRPO: rewards → normalised advantages → group-mean gradient of log π wrt the logit."""
    y = np.array(outcomes, dtype=float)
    r = y if label_correct else 1.0 - y
    if np.all(r == r[0]):
        return 0.0
    adv = (r - r.mean()) / (r.std(ddof=ddof) + eps)
    return float(np.mean(adv * (y - p)))  # ∂θ log π(y) = y − p for p = σ(θ)


def _prob(outcomes: tuple[int, ...], p: float) -> float:
    c = sum(outcomes)
    return p**c * (1 - p) ** (len(outcomes) - c)


def _brute_phi(s: float, k: int) -> float:
    total = 0.0
    for seq in itertools.product((0, 1), repeat=k):
        c = sum(seq)
        total += _prob(seq, s) * (1 if 2 * c > k else -1 if 2 * c < k else 0)
    return total


def _brute_q(p: float, k: int, eps: float, ddof: int) -> float:
    grad = sum(
        _prob(seq, p) * _group_grad(seq, p, True, eps, ddof) for seq in itertools.product((0, 1), repeat=k)
    )
    return p * (1 - p) * grad


@pytest.mark.parametrize("k", [1, 2, 3, 4, 5, 6])
def test_phi_and_q_match_enumeration_of_all_outcome_sequences(k: int) -> None:
    for p in (0.05, 0.3, 0.5, 0.77, 0.96):
        assert theory.phi(p, k) == pytest.approx(_brute_phi(p, k), abs=1e-13)
        assert theory.q(p, k) == pytest.approx(_brute_q(p, k, 0.0, 0), abs=1e-13)
        if k > 1:  # the trainer's convention: sample std with GRPO's epsilon
            got = theory.q(p, k, eps=1e-4, unbiased_std=True)
            assert got == pytest.approx(_brute_q(p, k, 1e-4, 1), abs=1e-13)


@pytest.mark.parametrize("k", [3, 4])
def test_drift_is_q_times_phi_when_the_label_is_a_peer_vote(k: int) -> None:
    """Enumerate the agent's K rollouts *and* the supervisor's K votes: E[dp/dt] = q_K(p) φ_K(s), ties no label."""
    for p, s in ((0.3, 0.8), (0.6, 0.25), (0.9, 0.5)):
        total = 0.0
        for votes in itertools.product((0, 1), repeat=k):
            c = sum(votes)
            if 2 * c == k:
                continue  # tie: no label, reward 0 everywhere, no update
            for own in itertools.product((0, 1), repeat=k):
                weight = _prob(votes, s) * _prob(own, p)
                total += weight * p * (1 - p) * _group_grad(own, p, 2 * c > k, 0.0, 0)
        assert total == pytest.approx(theory.q(p, k) * theory.phi(s, k), abs=1e-13)


def test_hand_computed_values() -> None:
    # φ_3(s) = P(C ≥ 2) − P(C ≤ 1) = 6s² − 4s³ − 1; at 0.9: 4.86 − 2.916 − 1 = 0.944.
    assert theory.phi(0.9, 3) == pytest.approx(0.944, abs=1e-12)
    # K = 2: a 1–1 tie gives no label, so φ_2(s) = s² − (1 − s)² = 2s − 1.
    assert theory.phi(0.3, 2) == pytest.approx(-0.4, abs=1e-12)
    # q_2(p) = p(1−p) · P(C=1) · g(1) = p(1−p) · 2p(1−p) · ½ = p²(1−p)²; at ½: 1/16.
    assert theory.q(0.5, 2) == pytest.approx(0.0625, abs=1e-12)
    assert theory.q(0.0, 8) == 0.0 and theory.q(1.0, 8) == 0.0  # the boundaries are fixed
    assert np.allclose(theory.phi(np.array([0.0, 0.5, 1.0]), 8), [-1.0, 0.0, 1.0])


def test_conserved_quantity_is_constant_along_co_rl_trajectories() -> None:
    k = 4
    traj = theory.integrate((0.7, 0.4), theory.ring_supervisors(2), k, tol=1e-3)
    inside = np.all((traj.p > 0.02) & (traj.p < 0.98), axis=0)
    idx = np.flatnonzero(inside)[:: max(1, inside.sum() // 8)]
    assert len(idx) >= 5 and traj.p[0, idx].max() - traj.p[0, idx].min() > 0.2  # it really moved
    values = [theory.potential(traj.p[0, i], k) - theory.potential(traj.p[1, i], k) for i in idx]
    assert np.ptp(values) < 1e-6
    # Under self-reward the same quantity is not conserved, so the check above can fail.
    own = theory.integrate((0.7, 0.4), theory.self_supervisors(2), k, horizon=20.0)
    start = theory.potential(0.7, k) - theory.potential(0.4, k)
    moved = theory.potential(own.p[0, -1], k) - theory.potential(own.p[1, -1], k)
    assert abs(moved - start) > 1e-2


@pytest.mark.parametrize(("start", "end"), [((0.6, 0.45), (1.0, 1.0)), ((0.55, 0.4), (0.0, 0.0))])
def test_trajectories_either_side_of_the_separatrix(
    start: tuple[float, float], end: tuple[float, float]
) -> None:
    traj = theory.integrate(start, theory.ring_supervisors(2), 8)
    assert traj.final == end
    assert np.allclose(traj.p[:, -1], end, atol=2e-6)


def test_separatrix_leads_to_the_saddle_and_self_reward_splits() -> None:
    assert theory.integrate((0.3, 0.7), theory.ring_supervisors(2), 8).final == (0.5, 0.5)
    assert theory.integrate((0.6, 0.45), theory.self_supervisors(2), 8).final == (1.0, 0.0)


def test_complementary_example() -> None:
    res = theory.compare(theory.COMPLEMENTARY, 8)
    assert res["self_reward"] == pytest.approx([0.5, 0.5], abs=1e-9)
    assert res["co_rl"] == pytest.approx([1.0, 1.0], abs=1e-9)


def test_ring_convention_and_three_agent_example() -> None:
    assert theory.ring_supervisors(3) == [1, 2, 0]
    # Agent 0 (0.9) is supervised by agent 1 (0.4), so it first moves *down*; agent 2 is lifted by agent 0.
    drift = theory.flow((0.9, 0.4, 0.4), theory.ring_supervisors(3), 8)
    assert drift[0] < 0 < drift[2]
    res = theory.compare(theory.RING3, 8)
    assert res["self_reward"] == pytest.approx([1 / 3] * 3, abs=1e-9)
    assert res["co_rl"] == pytest.approx([1.0] * 3, abs=1e-9)


def test_invalid_input_is_a_corl_error() -> None:
    with pytest.raises(CorlError, match="agent 1"):
        theory.integrate((0.5, 1.2), theory.ring_supervisors(2))
    with pytest.raises(CorlError, match="K must be"):
        theory.phi(0.5, 0)
    with pytest.raises(CorlError, match="0 < p < 1"):
        theory.potential(1.0, 8)


def test_cli_complementary_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["theory", "--example", "complementary", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) == {"self_reward_accuracy", "co_rl_accuracy"}
    assert out["self_reward_accuracy"] == pytest.approx(0.5, abs=1e-9)
    assert out["co_rl_accuracy"] == pytest.approx(1.0, abs=1e-9)


def test_cli_one_prompt_json_and_bad_input(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["theory", "--pa", "0.6", "--pb", "0.3", "--k", "4", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["co_rl"]["final_pa"], out["co_rl"]["final_pb"]) == (0.0, 0.0)
    assert (out["self_reward"]["final_pa"], out["self_reward"]["final_pb"]) == (1.0, 0.0)
    assert main(["theory", "--pa", "1.5", "--pb", "0.3"]) == 2
    assert "--pa must be an accuracy in [0, 1]" in capsys.readouterr().err


def test_cli_phase_portrait(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "flow.png"
    assert main(["theory", "--phase-portrait", str(out), "--k", "4"]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not list(tmp_path.glob(".*.tmp"))
