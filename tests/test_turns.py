"""Agents sharing a device take turns (one lane, no overlap) and keep their optimizer state and fp32 masters in
host memory between turns (corl_vl/train/offload.py); a run with the offload trains the same weights as one
without. Tiny randomly initialised models of the real architectures; the visible devices are injected, so the
CPU stands in for the shared GPU."""

from __future__ import annotations

import logging

import pytest
import torch

import corl_vl.recipe as recipe
from corl_vl.config import config_from_dict
from corl_vl.errors import CorlError
from corl_vl.recipe import build_cohort
from corl_vl.train.checkpoint import load_checkpoint, save_checkpoint
from corl_vl.train.offload import TurnOffload
from model_adapters.registry import create_adapter


def _cfg(dtype: str = "bfloat16", parallel: bool = True):
    return config_from_dict(
        {
            "agents": [
                {"name": n, "model": "tiny-qwen2.5", "adapter_kwargs": {"dtype": dtype}} for n in ("a", "b")
            ],
            "reward": {"name": "rent"},  # every completion gets a reward of its own: both agents train
            "data": {"limit": 4, "problems_per_step": 2},
            "grpo": {"k": 2, "max_new_tokens": 5, "micro_batch_size": 2},
            "rollout": {"engine": "hf"},
            "train": {
                "lr": 1e-3,
                "warmup_ratio": 0,
                "max_steps": 2,
                "plot": False,
                "parallel_agents": parallel,
            },
        }
    )


def _trained(agent) -> int:
    return sum(p.numel() for p in agent.model.parameters() if p.requires_grad)


def test_agents_on_one_device_take_turns_with_their_state_offloaded():
    cohort = build_cohort(_cfg(), visible_devices=["cpu"])
    assert (
        cohort.phases.lanes == [[0, 1]] and not cohort.phases.parallel
    )  # parallel_agents is on in the config
    assert set(cohort.offloads) == {"a", "b"}
    for agent in cohort.agents:
        offload = cohort.offloads[agent.name]
        # before any step: the bf16 weights' fp32 masters, kept as their low halves (2 B, train/optimizer.py)
        assert offload.away and offload.moved_bytes == 2 * _trained(agent)
    cohort.step()
    for agent in cohort.agents:
        offload = cohort.offloads[agent.name]
        # after its turn: the masters' low halves (2 B) and AdamW's two fp32 moments (8 B) per trained parameter
        # left the device (the fp32 gradient accumulators are freed after the step)
        assert offload.away and offload.turns == 1
        assert offload.moved_bytes == 10 * _trained(agent)
        assert all(m.device.type == "cpu" for _, m in agent.backend.masters)


def test_agents_on_their_own_devices_overlap_and_keep_their_state():
    cohort = build_cohort(_cfg(), visible_devices=["cpu", "cpu"])
    assert cohort.phases.lanes == [[0], [1]] and cohort.phases.parallel
    assert cohort.offloads == {}


def test_an_fp32_model_keeps_its_parameters_only_its_state_moves():
    adapter = create_adapter("tiny-qwen2.5")
    model = adapter.load_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for p in model.parameters():
        p.grad = torch.ones_like(p)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    where = {name: p.data_ptr() for name, p in model.named_parameters()}
    moments = {id(p): optimizer.state[p]["exp_avg"].data_ptr() for p in model.parameters()}
    offload = TurnOffload(optimizer, model)
    assert offload.own == []  # the optimizer's parameters are the model's
    n = sum(p.numel() for p in model.parameters())
    assert offload.offload() == 8 * n  # two fp32 moments per parameter, nothing else
    assert {name: p.data_ptr() for name, p in model.named_parameters()} == where
    assert all(optimizer.state[p]["exp_avg"].data_ptr() != moments[id(p)] for p in model.parameters())
    assert all(optimizer.state[p]["step"].dim() == 0 for p in model.parameters())  # the counter stays put
    offload.reload()
    assert {name: p.data_ptr() for name, p in model.named_parameters()} == where and not offload.away


@pytest.mark.slow  # > 20 s on the 2-core CI machine
def test_offload_between_turns_trains_the_same_weights():
    """Both runs one agent after another (parallel_agents off), so only the offload differs."""
    runs = []
    for visible in (["cpu", "cpu"], ["cpu"]):
        cohort = build_cohort(_cfg(parallel=False), visible_devices=visible)
        for _ in range(2):
            cohort.step()
        params = {
            f"{a.name}.{k}": v.detach().clone() for a in cohort.agents for k, v in a.model.named_parameters()
        }
        masters = [m.clone() for a in cohort.agents for _, m in a.backend.masters]
        moments = [s["exp_avg_sq"].clone() for a in cohort.agents for s in a.backend.optimizer.state.values()]
        runs.append((bool(cohort.offloads), params, masters, moments))
    (offloaded_a, p_a, m_a, v_a), (offloaded_b, p_b, m_b, v_b) = runs
    assert (offloaded_a, offloaded_b) == (False, True)
    assert p_a.keys() == p_b.keys() and all(torch.equal(p_a[k], p_b[k]) for k in p_a)
    assert len(m_a) == len(m_b) > 0 and all(torch.equal(x, y) for x, y in zip(m_a, m_b))
    assert len(v_a) == len(v_b) > 0 and all(torch.equal(x, y) for x, y in zip(v_a, v_b))
    assert any(not torch.equal(v, torch.zeros_like(v)) for v in v_b)  # the runs trained


def test_a_resume_while_offloaded_continues_as_the_uninterrupted_run(tmp_path):
    """The checkpoint is saved and loaded while both agents' state waits in host memory; the next step then
    matches the run that went on without stopping."""
    cfg = _cfg(parallel=False)
    straight = build_cohort(cfg, visible_devices=["cpu"])
    straight.step()
    saved = save_checkpoint(tmp_path, straight)
    straight.step()
    resumed = build_cohort(cfg, visible_devices=["cpu"])
    assert load_checkpoint(saved, resumed) == 1
    resumed.step()
    for a, b in zip(straight.agents, resumed.agents):
        assert resumed.offloads[b.name].away
        for (name, p), q in zip(a.model.named_parameters(), b.model.parameters()):
            assert torch.equal(p, q), name
        assert all(torch.equal(x, y) for (_, x), (_, y) in zip(a.backend.masters, b.backend.masters))


def test_the_first_log_lines_say_where_each_agent_is(tmp_path, monkeypatch, caplog):
    def stop(*args, **kwargs):
        raise CorlError("stopped before the models")

    monkeypatch.setattr(recipe, "build_cohort", stop)
    cfg = _cfg()
    cfg.train.output_dir = str(tmp_path / "run")
    with caplog.at_level(logging.INFO, logger="corl_vl"), pytest.raises(CorlError, match="before the models"):
        recipe.train(cfg, visible_devices=["cpu"])
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("placement:")]
    assert [line.split(" (")[0] for line in lines] == [
        "placement: agent a on cpu",
        "placement: agent b on cpu",
    ]
    assert "takes turns with b; its optimizer state and fp32 masters wait in CPU memory" in lines[0]


def test_lanes_overlap_while_the_agents_of_one_lane_run_in_order():
    from corl_vl.train.parallel import AgentPhases

    phases = AgentPhases(3, parallel=True, lanes=[[0, 2], [1]])
    seen: list[int] = []
    assert phases.map(lambda i: seen.append(i) or i * 10, [0, 1, 2]) == [0, 10, 20]
    assert seen.index(0) < seen.index(2)

    def fail(i):
        if i:
            raise ValueError(f"agent {i}")
        return i

    with pytest.raises(ValueError, match="agent 1"):  # the first failing agent in agent order, not lane order
        phases.map(fail, [0, 1, 2])
    phases.close()
