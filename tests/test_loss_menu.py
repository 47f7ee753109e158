"""The loss menu's formulas against numbers worked out by hand from each method's paper (never computed by the code
under test): policy losses, rollout corrections, KL estimators, entropy bonus, overlong penalty."""

from __future__ import annotations

import math

import pytest
import torch

from corl_vl.losses.rollout_correction import resolve_correction
from corl_vl.train.grpo import LossSpec, importance_weights, policy_loss
from corl_vl.train.reward_shaping import overlong_penalty

LN = math.log


def _lp(values):
    return torch.tensor(values, dtype=torch.float64)


def _run(logp, old, adv, mask, ref=None, **spec):
    logp = _lp(logp).requires_grad_(True)
    ref_logprobs = None if ref is None else _lp(ref)
    loss, metrics = policy_loss(
        logp, _lp(old), _lp(adv), _lp(mask), LossSpec(**spec), ref_logprobs=ref_logprobs
    )
    loss.backward()
    return float(loss.detach()), metrics, logp.grad


# ------------------------------------------------------------------ policy losses
def test_ppo_clip_with_asymmetric_ranges():
    """DAPO clip-higher: ε_low 0.2, ε_high 0.28. Ratios (old = 0): A=+1: 1.5 → clipped to 1.28, 1.1 → 1.1;
    A=−1: 0.5 → min(−0.5, −0.8) = −0.8, 1.2 → −1.2. Token mean: (−1.28 − 1.1 + 0.8 + 1.2) / 4 = −0.095."""
    loss, m, _ = _run(
        [[LN(1.5), LN(1.1)], [LN(0.5), LN(1.2)]],
        [[0.0, 0.0], [0.0, 0.0]],
        [1.0, -1.0],
        [[1, 1], [1, 1]],
        epsilon=0.2,
        epsilon_high=0.28,
    )
    assert loss == pytest.approx(-0.095, abs=1e-9)
    assert m["clip/high_frac"] == 0.25 and m["clip/low_frac"] == 0.25 and m["clip/frac"] == 0.5


def test_gspo_uses_the_length_normalised_sequence_ratio():
    """s = exp(mean_t Δ_t): A=+1, ratios 2 and 0.5 → s = 1 → ℓ = −1; A=−1, Δ = 0.3, 0.3 → s = e^0.3 = 1.3498588,
    the upper clip does not bind for A < 0 → ℓ = 1.3498588; A=+1, Δ = 0.3 (one token) → clipped to 1.2 → ℓ = −1.2.
    Mean over sequences (loss_type grpo): (−1 + 1.3498588 − 1.2) / 3 = −0.2833804."""
    loss, m, _ = _run(
        [[LN(2.0), LN(0.5)], [0.3, 0.3], [0.3, 0.0]],
        [[0.0, 0.0], [0.0, 0.0], [0.0, 0.0]],
        [1.0, -1.0, 1.0],
        [[1, 1], [1, 1], [1, 0]],
        policy_loss="gspo",
        loss_type="grpo",
    )
    assert loss == pytest.approx(-0.2833804, abs=1e-6)
    assert m["clip/high_frac"] == pytest.approx(1 / 5)  # the third sequence's one real token of five


def test_cispo_weights_every_token_with_a_detached_capped_ratio():
    """ℓ = −sg(min(r, 1 + ε_high))·A·logp with ε_high 0.28, A = 2: logp −1 with r 1.5 → w 1.28 → ℓ 2.56; logp −2
    with r 0.5 → w 0.5 (no lower bound) → ℓ 2.0. Token mean 2.28; gradient −w·A / 2 = (−1.28, −0.5)."""
    logp = [[-1.0, -2.0]]
    old = [[-1.0 - LN(1.5), -2.0 - LN(0.5)]]
    loss, m, grad = _run(logp, old, [2.0], [[1, 1]], policy_loss="cispo", epsilon_high=0.28)
    assert loss == pytest.approx(2.28, abs=1e-9)
    assert grad.tolist()[0] == pytest.approx([-1.28, -0.5], abs=1e-9)
    assert m["clip/high_frac"] == 0.5 and m["clip/low_frac"] == 0.0


def test_sapo_soft_gate_and_its_on_policy_gradient():
    """ℓ = −(4/τ)·σ(τ(r − 1))·A: A=+1, τ 1.0, r 1.5 → 4·σ(0.5) = 2.4898373 → ℓ −2.4898373; A=−1, τ 1.05, r 0.5 →
    (4/1.05)·σ(−0.525) = 1.4159383 → ℓ 1.4159383. At r = 1 the gate's slope is 4·σ(0)(1 − σ(0)) = 1: the gradient
    is PPO's, −A per token."""
    loss, m, _ = _run([[LN(1.5)], [LN(0.5)]], [[0.0], [0.0]], [1.0, -1.0], [[1], [1]], policy_loss="sapo")
    assert loss == pytest.approx((-2.4898373 + 1.4159383) / 2, abs=1e-6)
    assert m["clip/frac"] == 0.0
    _, _, grad = _run([[-0.7]], [[-0.7]], [3.0], [[1]], policy_loss="sapo", sapo_tau_pos=2.0)
    assert float(grad) == pytest.approx(-3.0, abs=1e-9)


def test_gmpo_geometric_mean_clipped_in_log_space():
    """ε = 0.4 (the paper's e^±0.4): A=+1, Δ = (0.6, −0.2) → (0.4, −0.2), mean 0.1 → ℓ = −e^0.1 = −1.1051709;
    A=−1, Δ = (−0.6, 0.2) → (−0.4, 0.2), mean −0.1 → ℓ = e^−0.1 = 0.9048374. Sequence mean: −0.1001668."""
    loss, m, _ = _run(
        [[0.6, -0.2], [-0.6, 0.2]],
        [[0.0, 0.0], [0.0, 0.0]],
        [1.0, -1.0],
        [[1, 1], [1, 1]],
        policy_loss="gmpo",
        epsilon=0.4,
        loss_type="grpo",
    )
    assert loss == pytest.approx(-0.1001668, abs=1e-6)
    assert m["clip/high_frac"] == 0.25 and m["clip/low_frac"] == 0.25


# ------------------------------------------------------------------ KL estimators and entropy bonus
@pytest.mark.parametrize(
    ("estimator", "value"),
    [("k1", 0.6931472), ("k2", 0.2402265), ("k3", 0.1931472)],  # ln 2; ½ (ln 2)²; ½ + ln 2 − 1
)
def test_kl_estimators(estimator, value):
    """p = 0.5, p_ref = 0.25, advantage 0 (the policy term is 0): the loss is β·KL = 0.1·KL."""
    loss, m, _ = _run(
        [[LN(0.5)]], [[LN(0.5)]], [0.0], [[1]], beta=0.1, kl_estimator=estimator, ref=[[LN(0.25)]]
    )
    assert loss == pytest.approx(0.1 * value, abs=1e-7)
    assert m["kl"] == pytest.approx(value, abs=1e-7)


def test_entropy_bonus_subtracts_coef_times_entropy():
    """Advantage 0, coef 0.01, entropies 1 and 2 nats: the loss is the token mean of −0.01·H = −0.015."""
    entropy = _lp([[1.0, 2.0]]).requires_grad_(True)
    loss, _ = policy_loss(
        _lp([[-1.0, -1.0]]),
        _lp([[-1.0, -1.0]]),
        _lp([0.0]),
        _lp([[1, 1]]),
        LossSpec(entropy_coef=0.01),
        entropy=entropy,
    )
    assert float(loss) == pytest.approx(-0.015, abs=1e-12)
    loss.backward()
    assert entropy.grad.tolist()[0] == pytest.approx(
        [-0.005, -0.005]
    )  # −coef / 2 tokens: more entropy, lower loss


# ------------------------------------------------------------------ rollout corrections
# Δ = trainer − rollout log-ratios: sequence 1 ratios (3, 0.8) (product 2.4, geometric mean 1.549),
# sequence 2 ratios (0.4, 1.5) (product 0.6, geometric mean 0.775)
RATIOS = [[3.0, 0.8], [0.4, 1.5]]


def _weights(mode, cap):
    trainer = torch.log(torch.tensor(RATIOS, dtype=torch.float64))
    return importance_weights(
        trainer, torch.zeros(2, 2, dtype=torch.float64), torch.ones(2, 2), cap=cap, mode=mode
    )


@pytest.mark.parametrize(
    ("mode", "cap", "rho", "key", "frac"),
    [
        ("token_tis", 2.0, [[2.0, 0.8], [0.4, 1.5]], "is/truncated_frac", 0.25),  # 3 → 2
        ("token_mask", 2.0, [[0, 1], [0, 1]], "is/masked_frac", 0.5),  # 3 > 2 and 0.4 < 1/2 masked
        ("seq_tis", 2.0, [[2.0, 2.0], [0.6, 0.6]], "is/truncated_frac", 0.5),  # 2.4 → 2
        ("seq_mask", 2.0, [[0, 0], [1, 1]], "is/masked_frac", 0.5),  # 2.4 > 2; 0.6 in [0.5, 2]
        ("geo_mask", 1.5, [[0, 0], [1, 1]], "is/masked_frac", 0.5),  # 1.549 > 1.5; 0.775 ≥ 1/1.5
    ],
)
def test_rollout_corrections(mode, cap, rho, key, frac):
    weights = _weights(mode, cap)
    assert weights.rho.tolist() == [pytest.approx(r, abs=1e-9) for r in rho]
    assert weights.metrics[key] == frac
    # the raw ratios before any correction: mean (3 + 0.8 + 0.4 + 1.5) / 4 = 1.425, max 3
    assert weights.metrics["is/ratio_mean"] == pytest.approx(1.425, abs=1e-9)
    assert weights.metrics["is/ratio_max"] == pytest.approx(3.0, abs=1e-9)


def test_no_cap_leaves_the_raw_ratios_and_only_logs_them():
    weights = _weights("none", None)
    assert weights.rho.tolist() == [pytest.approx(r, abs=1e-9) for r in RATIOS]
    assert weights.metrics["is/truncated_frac"] == 0.0 and "is/masked_frac" not in weights.metrics


@pytest.mark.parametrize(
    ("mode", "agent_cap", "grpo_cap", "family_cap", "expected"),
    [
        (None, None, None, 2.0, ("token_tis", 2.0)),  # the family default, as before the modes
        (None, None, None, None, ("none", None)),
        (None, None, 0, 2.0, ("none", None)),  # cap 0: off, as before
        (None, 3.0, 1.5, 2.0, ("token_tis", 3.0)),  # the agent's cap wins
        ("none", None, None, 2.0, ("none", None)),
        ("token_tis", None, None, 1.7, ("token_tis", 1.7)),  # the family's cap
        ("seq_mask", None, None, 1.7, ("seq_mask", 2.0)),  # the mode's default
        ("geo_mask", None, None, 2.0, ("geo_mask", 1.1)),
        ("token_mask", None, 4.0, 2.0, ("token_mask", 4.0)),
        ("seq_tis", 0, 4.0, 2.0, ("none", None)),
    ],
)
def test_resolve_correction(mode, agent_cap, grpo_cap, family_cap, expected):
    assert resolve_correction(mode, agent_cap, grpo_cap, family_cap) == expected


# ------------------------------------------------------------------ DAPO overlong shaping
def test_overlong_penalty_is_dapos_soft_ramp():
    """max_len 10, buffer 4: no penalty up to 6 tokens, then −(L − 6)/4·factor: 8 → −0.5, 10 → −1 (factor 1);
    factor 0.5 halves it."""
    lengths = torch.tensor([5, 6, 8, 10])
    assert overlong_penalty(lengths, max_len=10, buffer=4, factor=1.0).tolist() == [0.0, 0.0, -0.5, -1.0]
    assert overlong_penalty(lengths, max_len=10, buffer=4, factor=0.5).tolist() == [0.0, 0.0, -0.25, -0.5]
