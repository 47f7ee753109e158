"""GRPO maths on hand-computed examples (every expected number is written out, not recomputed)."""

from __future__ import annotations

import math

import pytest
import torch

from corl_vl.errors import CorlError
from corl_vl.train.grpo import (
    LossSpec,
    Normalizer,
    group_advantages,
    importance_weights,
    kl_k3,
    policy_loss,
)


def test_std_scaled_advantages_use_sample_std():
    # rewards [1,0,0,0]: mean 0.25; sample std sqrt((0.5625 + 3*0.0625)/3) = 0.5 (population std would be 0.4330)
    adv = group_advantages(torch.tensor([[1.0, 0.0, 0.0, 0.0]]))
    assert adv[0].tolist() == pytest.approx([0.75 / 0.5001, -0.25 / 0.5001, -0.25 / 0.5001, -0.25 / 0.5001])
    assert adv[0, 0].item() == pytest.approx(1.499700, abs=1e-6)


def test_all_equal_groups_get_zero_and_groups_are_independent():
    rewards = torch.tensor([[1.0, 1.0, 1.0], [0.0, 0.0, 0.0], [1.0, 0.0, 1.0]])
    adv = group_advantages(rewards)
    assert adv[0].tolist() == [0.0, 0.0, 0.0]
    assert adv[1].tolist() == [0.0, 0.0, 0.0]
    # third group: mean 2/3, sample std sqrt((1/9+4/9+1/9)/2) = sqrt(1/3) = 0.577350
    assert adv[2].tolist() == pytest.approx(
        [0.333333 / 0.577450, -0.666667 / 0.577450, 0.333333 / 0.577450], abs=1e-5
    )


def test_dr_grpo_advantages_are_centred_only():
    adv = group_advantages(torch.tensor([[1.0, 0.0, 0.0, 0.0], [0.5, 0.5, 0.5, 0.5]]), scale="dr_grpo")
    assert adv.tolist() == [[0.75, -0.25, -0.25, -0.25], [0.0, 0.0, 0.0, 0.0]]


def test_single_completion_group_and_bad_scale():
    assert group_advantages(torch.tensor([[1.0]])).tolist() == [[0.0]]
    with pytest.raises(CorlError, match=r"grpo\.advantage"):
        group_advantages(torch.zeros(1, 2), scale="ppo")


def test_kl_k3_value():
    # ref − logp = 0.5 → e^0.5 − 0.5 − 1 = 0.148721
    assert kl_k3(torch.tensor([-1.5]), torch.tensor([-1.0])).item() == pytest.approx(0.1487212707)
    assert kl_k3(torch.tensor([-1.0]), torch.tensor([-1.0])).item() == 0.0


def _loss_and_grad(ratio: float, adv: float, spec: LossSpec) -> tuple[float, float]:
    """Loss and d loss / d logp for one token whose ratio π/π_old is ``ratio``."""
    logp = torch.tensor([[math.log(ratio)]], dtype=torch.float64, requires_grad=True)
    old = torch.zeros(1, 1, dtype=torch.float64)
    loss, _ = policy_loss(logp, old, torch.tensor([adv]), torch.ones(1, 1), spec)
    loss.backward()
    return loss.item(), logp.grad.item()


def test_clipping_at_the_boundary_both_sides():
    spec = LossSpec(epsilon=0.2)
    # positive advantage, ratio above 1+ε: clipped → loss −1.2·A, no gradient
    assert _loss_and_grad(1.3, 2.0, spec) == pytest.approx((-2.4, 0.0))
    # positive advantage, ratio just inside: unclipped → loss −r·A, gradient −r·A
    assert _loss_and_grad(1.19, 2.0, spec) == pytest.approx((-2.38, -2.38))
    # negative advantage, ratio below 1−ε: clipped → loss −0.8·A = 1.6, no gradient
    assert _loss_and_grad(0.7, -2.0, spec) == pytest.approx((1.6, 0.0))
    # negative advantage, ratio above 1+ε: the pessimistic min keeps r·A → unclipped, gradient flows
    assert _loss_and_grad(1.5, -2.0, spec) == pytest.approx((3.0, 3.0))
    # positive advantage, ratio below 1−ε: unclipped too
    assert _loss_and_grad(0.5, 2.0, spec) == pytest.approx((-1.0, -1.0))


def test_asymmetric_epsilon_high():
    spec = LossSpec(epsilon=0.2, epsilon_high=0.28)
    assert _loss_and_grad(1.25, 1.0, spec) == pytest.approx((-1.25, -1.25))  # inside 1.28 now
    assert _loss_and_grad(1.3, 1.0, spec) == pytest.approx((-1.28, 0.0))
    assert _loss_and_grad(0.7, -1.0, spec) == pytest.approx((0.8, 0.0))  # low side still 0.2


def test_clip_fraction_metric():
    logp = torch.log(torch.tensor([[1.3, 1.0, 0.7, 1.0]]))
    _, m = policy_loss(logp, torch.zeros(1, 4), torch.tensor([1.0]), torch.ones(1, 4), LossSpec())
    assert (
        m["clip/high_frac"] == pytest.approx(0.25) and m["clip/low_frac"] == 0.0
    )  # 0.7 with A>0: not clipped
    _, m = policy_loss(logp, torch.zeros(1, 4), torch.tensor([-1.0]), torch.ones(1, 4), LossSpec())
    assert m["clip/low_frac"] == pytest.approx(0.25) and m["clip/frac"] == pytest.approx(0.25)


# Two sequences, ratio 1 everywhere (on-policy), so per-token loss = −A:
# seq 0: A = 1, 3 real tokens; seq 1: A = −2, 1 real token; padded T = 4.
LOGP = torch.zeros(2, 4)
ADV = torch.tensor([1.0, -2.0])
MASK = torch.tensor([[1.0, 1.0, 1.0, 0.0], [1.0, 0.0, 0.0, 0.0]])


@pytest.mark.parametrize(
    ("loss_type", "max_len", "expected"),
    [
        ("bnpo", None, (-3.0 + 2.0) / 4),  # token mean: −0.25
        ("grpo", None, ((-3.0 / 3) + (2.0 / 1)) / 2),  # per-sequence mean then mean: 0.5
        ("dr_grpo", None, (-3.0 + 2.0) / (2 * 4)),  # sum / (B·T): −0.125
        ("dr_grpo", 10, (-3.0 + 2.0) / (2 * 10)),  # sum / (B·max_len): −0.05
    ],
)
def test_aggregation_modes(loss_type, max_len, expected):
    loss, _ = policy_loss(LOGP, LOGP, ADV, MASK, LossSpec(loss_type=loss_type, max_len=max_len))
    assert loss.item() == pytest.approx(expected)


@pytest.mark.parametrize("loss_type", ["bnpo", "grpo", "dr_grpo"])
def test_micro_batches_sum_to_full_batch(loss_type):
    spec = LossSpec(loss_type=loss_type, max_len=6)
    logp = torch.tensor([[-0.1, -0.2, -0.3, 0.0], [-0.5, 0.0, 0.0, 0.0]])
    old = torch.tensor([[-0.2, -0.2, -0.1, 0.0], [-0.4, 0.0, 0.0, 0.0]])
    full, _ = policy_loss(logp, old, ADV, MASK, spec)
    norm = Normalizer.of(MASK)
    parts = [
        policy_loss(logp[i : i + 1], old[i : i + 1], ADV[i : i + 1], MASK[i : i + 1], spec, normalizer=norm)[
            0
        ]
        for i in range(2)
    ]
    assert (parts[0] + parts[1]).item() == pytest.approx(full.item())


def test_kl_term_is_added_with_beta():
    logp = torch.full((1, 2), -1.5)
    ref = torch.full((1, 2), -1.0)
    spec = LossSpec(beta=0.1)
    loss, m = policy_loss(logp, logp, torch.tensor([0.0]), torch.ones(1, 2), spec, ref_logprobs=ref)
    assert loss.item() == pytest.approx(0.1 * 0.1487212707)
    assert m["kl"] == pytest.approx(0.1487212707)
    with pytest.raises(CorlError, match="reference"):
        policy_loss(logp, logp, torch.tensor([0.0]), torch.ones(1, 2), spec)


def test_importance_ratio_truncation_and_stats():
    trainer = torch.tensor([[-1.0, -1.0, -1.0, -1.0]])
    rollout = torch.tensor([[-1.0, -2.0, -0.5, -1.0]])  # diffs 0, 1, −0.5, (padding)
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]])
    w = importance_weights(trainer, rollout, mask, cap=2.0)
    # raw ρ = 1, e^1 = 2.718282 → truncated to 2, e^−0.5 = 0.606531; padding → 1
    assert w.rho.tolist()[0] == pytest.approx([1.0, 2.0, 0.6065307, 1.0])
    m = w.metrics
    assert m["is/ratio_min"] == pytest.approx(0.6065307)
    assert m["is/ratio_max"] == pytest.approx(2.7182818)
    assert m["is/ratio_mean"] == pytest.approx((1.0 + 2.7182818 + 0.6065307) / 3)
    assert m["is/truncated_frac"] == pytest.approx(1 / 3)
    assert m["is/logprob_diff_mean"] == pytest.approx(0.5)
    assert m["is/logprob_diff_max"] == pytest.approx(1.0)
    assert m["is/nonfinite_tokens"] == 0.0


def test_nan_rollout_logprobs_are_contained():
    trainer = torch.tensor([[-1.0, -1.0, -1.0]])
    rollout = torch.tensor([[float("nan"), -1.5, float("-inf")]])
    w = importance_weights(trainer, rollout, torch.ones(1, 3), cap=3.0)
    assert w.rho.tolist()[0] == pytest.approx([1.0, 1.6487213, 1.0])
    assert w.metrics["is/nonfinite_tokens"] == 2.0
    assert w.metrics["is/ratio_max"] == pytest.approx(1.6487213)
    # ρ multiplies the per-token loss: A = 1, on-policy → per-token −ρ, token mean −(1 + 1.648721 + 1)/3
    loss, _ = policy_loss(trainer, trainer, torch.tensor([1.0]), torch.ones(1, 3), LossSpec(), rho=w.rho)
    assert loss.item() == pytest.approx(-(3.6487213) / 3)
    assert torch.isfinite(loss)


def test_entropy_metric_is_masked_mean():
    ent = torch.tensor([[1.0, 3.0, 100.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    _, m = policy_loss(
        torch.zeros(1, 3), torch.zeros(1, 3), torch.tensor([1.0]), mask, LossSpec(), entropy=ent
    )
    assert m["entropy"] == 2.0


def test_bad_loss_type():
    with pytest.raises(CorlError, match=r"grpo\.loss_type"):
        LossSpec(loss_type="mean")
