"""GRPO batch controls on tiny real models: several updates per batch, truncated completions, more votes than
trained samples (docs/training.md, "Trainer controls")."""

from __future__ import annotations

import pytest
import torch
from test_cohort import TINY, TINY_COHORT, ForcedTexts, boxed
from test_update_edges import solo_rollout

from corl_vl.config import config_from_dict, load_config
from corl_vl.errors import CorlError
from corl_vl.train.agent import Agent, AgentSettings, Batch
from corl_vl.train.cohort import Cohort
from corl_vl.train.subsets import advantages_and_rows
from model_adapters.registry import create_adapter


def _solo(**grpo):
    return config_from_dict(
        {
            "agents": [{"name": "solo", "model": "tiny-qwen2.5"}],
            "reward": {"name": "rent"},
            "data": {"limit": 2, "problems_per_step": 2},
            "grpo": {"k": 2, "max_new_tokens": 4, "micro_batch_size": 2, **grpo},
            "train": {"lr": 0.1, "warmup_ratio": 0, "scheduler": "constant"},
        }
    )


def _batch(rows, comps, advantages, trained=None):
    lp = torch.zeros(len(comps), max(len(c.ids) for c in comps))
    for i, c in enumerate(comps):
        lp[i, : len(c.ids)] = torch.tensor(c.logprobs)
    return Batch(list(rows), [list(c.ids) for c in comps], lp, torch.tensor(advantages), trained)


# ------------------------------------------------------------------ grpo.updates_per_batch
def test_second_update_sees_moved_ratios_and_clips():
    agent, rows, comps = solo_rollout(_solo(updates_per_batch=2, epsilon=0.01))
    metrics = agent.update(_batch(rows, comps, [1.0, -1.0, 1.0, -1.0]))
    first, second = agent.last_updates
    assert first["trained_rows"] == 2 and second["trained_rows"] == 2  # one group per mini-batch
    # the first step scores the weights the old logprobs came from; the second, weights moved by a large step
    assert first["ratio/mean"] == pytest.approx(1.0, abs=1e-4) and first["clip/frac"] == 0.0
    assert abs(second["ratio/mean"] - 1.0) > 1e-3 and second["clip/frac"] > 0.0
    assert metrics["update/count"] == 2.0 and metrics["trained_rows"] == 4.0


def test_one_update_per_batch_takes_one_step_and_reports_no_ratio():
    agent, rows, comps = solo_rollout(_solo())
    metrics = agent.update(_batch(rows, comps, [1.0, -1.0, 1.0, -1.0]))
    assert len(agent.last_updates) == 1 and "ratio/mean" not in metrics and "update/count" not in metrics


def test_updates_per_batch_needs_whole_groups():
    with pytest.raises(CorlError, match=r"grpo\.updates_per_batch"):
        _solo(updates_per_batch=3)


def test_the_schedule_counts_optimizer_steps():
    cfg = _solo(updates_per_batch=2)
    cfg.train.scheduler, cfg.train.max_steps = "cosine", 4
    agent, rows, comps = solo_rollout(cfg)
    for _ in range(4):
        agent.update(_batch(rows, comps, [1.0, -1.0, 1.0, -1.0]))
    assert agent.backend.scheduler.last_epoch == 8
    assert agent.backend.optimizer.param_groups[0]["lr"] == pytest.approx(0.0, abs=1e-12)  # cosine ends at 0


# ------------------------------------------------------------------ grpo.truncated
def test_truncated_advantages_worked_example():
    rewards = torch.tensor([[1.0, 0.0, 1.0, 0.0]])
    cut = torch.tensor([[False, False, False, True]])
    keep, rows = advantages_and_rows(rewards, cut, mode="keep", scale="dr_grpo")
    assert keep.tolist() == [0.5, -0.5, 0.5, -0.5] and rows is None
    mask, rows = advantages_and_rows(rewards, cut, mode="mask", scale="dr_grpo")
    assert mask.tolist() == [0.5, -0.5, 0.5, -0.5] and rows.tolist() == [True, True, True, False]
    drop, rows = advantages_and_rows(rewards, cut, mode="drop", scale="dr_grpo")
    # the truncated completion leaves the group: mean of [1, 0, 1] = 2/3
    assert drop.tolist() == pytest.approx([1 / 3, -2 / 3, 1 / 3, 0.0]) and rows.tolist() == [
        True,
        True,
        True,
        False,
    ]


def _two_agents(cfg):
    agent, rows, comps = solo_rollout(cfg)
    twin_adapter = create_adapter("tiny-qwen2.5")
    twin = Agent(
        "twin",
        twin_adapter,
        twin_adapter.load_model().train(),
        list(agent.view.values()),
        AgentSettings.of(cfg),
    )
    twin.model.load_state_dict(agent.model.state_dict())
    return agent, twin, rows, comps


def test_rows_left_out_of_the_loss_train_like_the_batch_without_them():
    agent, twin, rows, comps = _two_agents(_solo())
    adv = [1.0, -1.0, 1.0, -1.0]
    metrics = agent.update(_batch(rows, comps, adv, trained=torch.tensor([True, True, False, False])))
    alone = twin.update(_batch(rows[:2], comps[:2], adv[:2]))
    assert metrics["trained_rows"] == 2.0
    # the same loss totals too (AdamW hides a uniform gradient scale, the pre-clip norm does not)
    assert metrics["grad_norm"] == pytest.approx(alone["grad_norm"], rel=1e-5)
    for a, b in zip(agent.model.parameters(), twin.model.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_cohort_drops_truncated_completions_and_counts_them():
    cohort = Cohort.from_config(load_config(TINY_COHORT, [*TINY, "grpo.truncated=drop"]))
    qwen, internvl = cohort.agents
    qwen.engine = ForcedTexts(qwen.engine, boxed(3, 5, 5, 5))
    internvl.engine = ForcedTexts(internvl.engine, boxed(3, 3, 3, 5))
    metrics = cohort.step()
    for agent_step, name in zip(cohort.last, ("qwen", "internvl")):
        comps = [c for r in agent_step.rollouts for c in r.completions]
        cut = [c.finish_reason == "length" for c in comps]
        assert metrics[name]["truncated/frac"] == sum(cut) / len(comps)
        assert metrics[name]["trained_rows"] <= len(comps) - sum(cut)


# ------------------------------------------------------------------ grpo.votes
def test_ttrl_votes_with_every_sample_and_trains_the_first_k():
    # over all 4 answers qwen's majority is 5; its first 2 (3, 5) alone would tie and give no label
    cohort = Cohort.from_config(
        load_config(TINY_COHORT, [*TINY, "reward.name=ttrl", "grpo.k=2", "grpo.votes=4"])
    )
    for agent in cohort.agents:
        agent.engine = ForcedTexts(agent.engine, boxed(3, 5, 5, 5))
    metrics = cohort.step()
    qwen = cohort.last[0]
    assert all(len(v) == 4 for v in cohort.last_answers["qwen"].values())  # the vote saw 4 samples
    assert set(qwen.labels.values()) == {"5"}
    assert qwen.rewards == {pid: [0.0, 1.0] for pid in qwen.rewards}  # the trained subset: first 2
    assert all(len(r.completions) == 2 for r in qwen.rollouts)
    assert metrics["qwen"]["trained_rows"] == 4.0  # 2 problems × k=2


def test_peer_votes_use_every_sample():
    # internvl's 4 answers say 3 (its first 2, 5 and 3, would tie); qwen is rewarded against 3
    cohort = Cohort.from_config(load_config(TINY_COHORT, [*TINY, "grpo.k=2", "grpo.votes=4"]))
    qwen, internvl = cohort.agents
    qwen.engine = ForcedTexts(qwen.engine, boxed(3, 5, 5, 5))
    internvl.engine = ForcedTexts(internvl.engine, boxed(5, 3, 3, 3))
    cohort.step()
    st_q = cohort.last[0]
    assert set(st_q.labels.values()) == {"3"}
    assert st_q.rewards == {pid: [1.0, 0.0] for pid in st_q.rewards}


def test_votes_below_k_are_refused():
    with pytest.raises(CorlError, match=r"grpo\.votes"):
        _solo(votes=1)
