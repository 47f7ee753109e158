"""The loss menu on tiny real models: every new option at its "off" value trains bit-identically to the default,
the options that act move training, and bad combinations are refused in one line before models load."""

from __future__ import annotations

import pytest
import torch

from corl_vl.config import config_from_dict
from corl_vl.errors import CorlError
from corl_vl.train.cohort import Cohort

OFF = {
    "policy_loss": "ppo_clip",
    "rollout_correction": "token_tis",  # the family default (every shipped family: token TIS at 2.0)
    "kl_estimator": "k3",
    "kl_placement": "loss",
    "entropy_coef": 0.0,
    "overlong_buffer": 0,
    "overlong_penalty": 1.0,
    "sapo_tau_pos": 1.0,
    "sapo_tau_neg": 1.05,
}


def _cfg(**grpo):
    return config_from_dict(
        {
            "agents": [{"name": "solo", "model": "tiny-qwen2.5"}],
            "reward": {"name": "rent"},  # label-free: random tiny models get varied rewards
            "data": {"limit": 4, "problems_per_step": 2},
            "grpo": {"k": 4, "max_new_tokens": 6, "micro_batch_size": 4, "beta": 0.05, **grpo},
            "train": {"lr": 1e-3, "warmup_ratio": 0, "scheduler": "constant", "plot": False, "max_steps": 2},
        }
    )


def _train(cfg, steps=2):
    """(per-step metrics without times, final parameters) of a fresh cohort trained ``steps`` steps."""
    torch.manual_seed(0)
    cohort = Cohort.from_config(cfg)
    metrics = []
    for _ in range(steps):
        m = cohort.step()
        metrics.append({a: {k: v for k, v in am.items() if not k.startswith("time/")} for a, am in m.items()})
    params = {n: p.detach().clone() for a in cohort.agents for n, p in a.model.named_parameters()}
    return metrics, params, cohort


def _same(run_a, run_b):
    (m_a, p_a, _), (m_b, p_b, _) = run_a, run_b
    assert m_a == m_b
    assert p_a.keys() == p_b.keys() and all(torch.equal(p_a[k], p_b[k]) for k in p_a)


@pytest.fixture(scope="module")
def default_run():
    return _train(_cfg())


def test_every_option_at_its_off_value_trains_bit_identically(default_run):
    _same(default_run, _train(_cfg(**OFF)))


def test_correction_off_equals_cap_zero():
    _same(_train(_cfg(importance_ratio_cap=0)), _train(_cfg(rollout_correction="none")))


@pytest.mark.parametrize(
    "option",
    [
        {"kl_estimator": "k2"},
        {"entropy_coef": 0.5},
    ],
)
def test_an_option_that_acts_changes_the_weights(default_run, option):
    _, p_default, _ = default_run
    _, p, _ = _train(_cfg(**option))
    assert any(not torch.equal(p_default[k], p[k]) for k in p)


@pytest.fixture(scope="module")
def ppo_two_updates():
    return _train(_cfg(updates_per_batch=2))


@pytest.mark.parametrize("loss", ["gspo", "cispo", "sapo", "gmpo"])
def test_each_policy_loss_trains_differently_from_ppo_off_policy(ppo_two_updates, loss):
    """Two updates per batch, so the second sees ratios ≠ 1 (with one, CISPO's and SAPO's gradients equal PPO's:
    at r = 1 the capped weight and the gate's slope are 1)."""
    _, p, _ = _train(_cfg(updates_per_batch=2, policy_loss=loss))
    _, p_ppo, _ = ppo_two_updates
    assert any(not torch.equal(p_ppo[k], p[k]) for k in p)
    assert all(torch.isfinite(v).all() for v in p.values())


def test_kl_in_the_reward_leaves_the_loss_and_penalises_the_reward():
    """Placement reward: the loss carries no β term (β = 0 in the loss spec) and from the second step on, when the
    policy has left its reference, each reward drops by β·Σ_t KL_t (metric shaping/kl_penalty > 0)."""
    metrics, _, cohort = _train(_cfg(kl_placement="reward"))
    agent = cohort.agents[0]
    assert agent.loss_spec.beta == 0.0 and agent.ref_model is not None
    assert metrics[0]["solo"]["shaping/kl_penalty"] == 0.0  # the first step: policy = reference, KL exactly 0
    assert metrics[1]["solo"]["shaping/kl_penalty"] > 0.0
    assert "kl" not in metrics[1]["solo"]


def test_overlong_penalty_is_logged():
    """(Random tiny models rarely stop early: all completions then get the same −1 and the advantages, centred in
    each group, do not change — the formula is tested by hand in tests/test_loss_menu.py.)"""
    metrics, _, _ = _train(_cfg(overlong_buffer=6), steps=1)
    assert -1.0 <= metrics[0]["solo"]["shaping/overlong_penalty"] < 0.0


@pytest.mark.parametrize(
    ("grpo", "key"),
    [
        ({"policy_loss": "ppo"}, "grpo.policy_loss: must be one of ppo_clip, gspo, cispo, sapo, gmpo"),
        ({"rollout_correction": "tis"}, "grpo.rollout_correction: must be one of none, token_tis"),
        ({"kl_estimator": "k4"}, "grpo.kl_estimator: must be one of k1, k2, k3"),
        ({"kl_placement": "advantage"}, "grpo.kl_placement: must be one of loss, reward"),
        ({"sapo_tau_neg": 0}, "grpo.sapo_tau_neg: must be > 0"),
        ({"entropy_coef": -0.1}, "grpo.entropy_coef: must be ≥ 0"),
        ({"overlong_buffer": 7}, "grpo.overlong_buffer: must be in [0, grpo.max_new_tokens=6]"),
        ({"rollout_correction": "seq_tis", "importance_ratio_cap": 0}, "grpo.importance_ratio_cap: 0 turns"),
        (
            {"rollout_correction": "token_mask", "importance_ratio_cap": 0.9},
            "grpo.importance_ratio_cap: token_mask keeps ratios in [1/τ, τ]",
        ),
        ({"top_p": 0.9}, "grpo.top_p: 0.9 < 1 with agent solo's rollout correction on"),
        ({"top_p": 0.9, "rollout_correction": "seq_mask"}, "grpo.top_p: 0.9 < 1"),
    ],
)
def test_refusals_are_one_line_before_models_load(grpo, key):
    with pytest.raises(CorlError) as err:
        _cfg(**grpo)
    assert str(err.value).startswith(key) and "\n" not in str(err.value)


@pytest.mark.parametrize("off", [{"rollout_correction": "none"}, {"importance_ratio_cap": 0}])
def test_top_p_is_accepted_with_the_correction_off(off):
    assert _cfg(top_p=0.9, **off).grpo.top_p == 0.9
