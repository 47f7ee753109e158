"""The update on inputs that only show up at scale: short or missing rollout logprobs, empty completions,
non-finite logprobs without IS correction, bf16 weights with a plain torch optimizer, the IS defaults."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from corl_vl.config import config_from_dict
from corl_vl.data.synth import generate_problems, to_text_problem
from corl_vl.errors import CorlError
from corl_vl.rollout import Completion
from corl_vl.rollout.vllm_engine import completion_logprobs
from corl_vl.train.agent import Agent, AgentSettings, Batch
from corl_vl.train.backends import TorchBackend
from model_adapters.registry import create_adapter, list_adapters


def _cfg(**train):
    return config_from_dict(
        {
            "agents": [{"name": "solo", "model": "tiny-qwen2.5"}],
            "data": {"limit": 2, "problems_per_step": 2},
            "grpo": {"k": 2, "max_new_tokens": 4, "micro_batch_size": 2},
            "train": {"reward": "rent", "warmup_ratio": 0, "scheduler": "constant", **train},
        }
    )


@pytest.fixture
def rolled():
    """A real agent and one real rollout of it, per test (tests update the agent)."""
    return solo_rollout(_cfg(lr=1e-2))


def solo_rollout(cfg):
    """An agent on a tiny Qwen2.5 text model (config ``cfg``) and the prompt and completion of every row of one
    real rollout of it (2 problems)."""
    adapter = create_adapter("tiny-qwen2.5")
    view = [to_text_problem(p) for p in generate_problems(2, seed=4)]
    agent = Agent("solo", adapter, adapter.load_model().train(), view, AgentSettings.of(cfg))
    prompts, rollouts = agent.rollout([p.id for p in view], seed=3)
    rows = [p for p, r in zip(prompts, rollouts) for _ in r.completions]
    comps = [c for r in rollouts for c in r.completions]
    return agent, rows, comps


def _batch(rows, comps, advantages, nan_at=None):
    width = max(len(c.ids) for c in comps)  # 0 when every completion is empty
    lp = torch.zeros(len(comps), width)
    for i, c in enumerate(comps):
        lp[i, : len(c.ids)] = torch.tensor(c.logprobs)
    if nan_at is not None:
        lp[nan_at] = math.nan
    return Batch(list(rows), [list(c.ids) for c in comps], lp, torch.tensor(advantages))


# ------------------------------------------------------------------ 4. one logprob per completion token
def test_a_completion_needs_exactly_one_logprob_per_token():
    Completion(ids=[5, 6], text="", logprobs=[-0.1, -0.2], finish_reason="stop")
    with pytest.raises(CorlError, match="2 tokens"):
        Completion(ids=[5, 6], text="", logprobs=[-0.1], finish_reason="stop")
    with pytest.raises(CorlError, match="exactly one"):
        Completion(ids=[5, 6], text="", logprobs=[], finish_reason="length")


def test_vllm_logprob_entries_missing_are_nan_and_a_short_list_raises():
    entry = SimpleNamespace(logprob=-0.5)
    got = completion_logprobs([7, 8, 9], [{7: entry}, {3: entry}, None])
    assert got[0] == -0.5 and math.isnan(got[1]) and math.isnan(got[2])
    with pytest.raises(CorlError, match="2 logprob entries for 3"):
        completion_logprobs([7, 8, 9], [{7: entry}, {8: entry}])
    with pytest.raises(CorlError, match="0 logprob entries"):
        completion_logprobs([7], None)


def test_missing_rollout_logprobs_get_weight_one_and_are_counted(rolled):
    agent, rows, comps = rolled
    assert agent.importance_ratio_cap == 2.0  # the family default is on
    metrics = agent.update(_batch(rows, comps, [1.0, -1.0, 1.0, -1.0], nan_at=(0, 0)))
    assert metrics["is/nonfinite_tokens"] == 1.0
    assert math.isfinite(metrics["loss"]) and math.isfinite(metrics["grad_norm"])


# ------------------------------------------------------------------ 9. no IS correction: NaN is not fatal
def test_nan_rollout_logprobs_do_not_raise_when_the_ratio_is_not_applied(rolled):
    agent, rows, comps = rolled
    saved = agent.importance_ratio_cap, agent.adapter.contain_nonfinite_rollout_logprobs
    agent.importance_ratio_cap = None  # importance_ratio_cap: 0 in the config
    agent.adapter.contain_nonfinite_rollout_logprobs = False  # a family that treats NaN as a bug
    try:
        metrics = agent.update(_batch(rows, comps, [1.0, -1.0, 1.0, -1.0], nan_at=(1, 0)))
    finally:
        agent.importance_ratio_cap, agent.adapter.contain_nonfinite_rollout_logprobs = saved
    assert metrics["is/nonfinite_tokens"] == 1.0 and math.isfinite(metrics["loss"])


def test_every_family_has_its_importance_ratio_cap_on():
    # a family states the cap only where it differs from the base's (issue 44); on by default (docs/training.md)
    for name, cls in list_adapters().items():
        assert cls.importance_ratio_cap is not None and cls.importance_ratio_cap > 1, name


# ------------------------------------------------------------------ 8. empty completions are not trained
def test_a_micro_batch_of_only_empty_completions_is_skipped(rolled):
    agent, rows, comps = rolled
    empty = [Completion(ids=[], text="", logprobs=[], finish_reason="invalid") for _ in comps]
    before = [p.detach().clone() for p in agent.model.parameters()]
    metrics = agent.update(_batch(rows, empty, [1.0, -1.0, 1.0, -1.0]))
    assert metrics["trained_rows"] == 0.0
    assert all(torch.equal(a.detach(), b) for a, b in zip(agent.model.parameters(), before))
    # mixed: the empty rows are left out, the others train
    mixed = [empty[0], comps[1], empty[2], comps[3]]
    metrics = agent.update(_batch(rows, mixed, [1.0, -1.0, 1.0, -1.0]))
    assert metrics["trained_rows"] == 2.0 and metrics["grad_norm"] > 0


# ------------------------------------------------------------------ 5. bf16 weights with a plain optimizer
def _bf16_train(master_weights):
    """10 AdamW steps at lr 1e-6 on a bf16 tiny model; returns (backend, fraction of parameters changed)."""
    adapter = create_adapter("tiny-qwen2.5", dtype="bfloat16")
    model = adapter.load_model().train()
    assert next(model.parameters()).dtype == torch.bfloat16
    backend = TorchBackend(model, _cfg(lr=1e-6).train, lr=1e-6, master_weights=master_weights)
    problems = [to_text_problem(p) for p in generate_problems(2, seed=5)]
    prompts = [adapter.encode_prompt(p) for p in problems]
    before = [p.detach().clone() for p in model.parameters()]
    for _ in range(10):
        backend.zero_grad()
        lp = adapter.completion_logprobs(model, prompts, [[11, 12, 13], [14, 15]]).logprobs
        backend.backward(-lp.sum())
        backend.step(None, zero_loss=lambda: torch.zeros(()))
    changed = sum(int((a.detach() != b).sum()) for a, b in zip(model.parameters(), before))
    return backend, changed / sum(b.numel() for b in before)


def test_bf16_weights_change_at_a_small_learning_rate():
    backend, changed = _bf16_train(master_weights=None)  # the default: decided by the parameters' dtype
    assert backend.masters  # fp32 master weights for low-precision parameters
    _, changed_without = _bf16_train(master_weights=False)  # AdamW straight on bf16: updates round away
    assert changed_without < 0.05 and changed > 0.1, (changed_without, changed)
    # the fp32 masters travel with the trainer state, so a resume continues from them, not the rounded copy
    fresh = TorchBackend(backend.model, _cfg(lr=1e-6).train, lr=1e-6)
    fresh.load_state_dict(backend.state_dict())
    assert all(torch.equal(m, n) for (_, m), (_, n) in zip(fresh.masters, backend.masters))


def test_fp32_models_are_stepped_directly():
    adapter = create_adapter("tiny-qwen2.5")
    backend = TorchBackend(adapter.load_model(), _cfg().train, lr=1e-6)
    assert backend.masters == [] and "master_weights" not in backend.state_dict()
