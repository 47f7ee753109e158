"""The rollout engine's sleep / wake / sync order through real cohort steps, for the HF and the vLLM engine.

The engines are the real classes, subclassed only to record their calls and to fail a weight sync into a
sleeping engine (on GPU, vLLM's level-1 sleep frees the weights' memory: a reload there writes freed memory,
and wake_up restores the stale backup over it). On CPU vLLM refuses to sleep, so the recorder keeps the
asleep state itself; the order it checks is the one the GPU run gets.
"""

from __future__ import annotations

import copy

import pytest
import torch

from corl_vl.config import config_from_dict
from corl_vl.data.synth import generate_problems, to_text_problem
from corl_vl.rollout.hf import HFEngine
from corl_vl.train.agent import Agent, AgentSettings
from corl_vl.train.cohort import Cohort
from model_adapters.registry import create_adapter


class RecordingEngine:
    """Mixed in before a real engine class: records calls, refuses to sync or generate while asleep."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.calls: list[str] = []
        self.asleep = False

    def generate(self, problems, **kwargs):
        assert not self.asleep, "generate on a sleeping engine"
        self.calls.append("generate")
        return super().generate(problems, **kwargs)

    def sync_weights(self, model):
        assert self.calls[-1] == "wake:weights", (
            "weights synced into a sleeping engine, or beside its KV cache"
        )
        self.calls.append("sync")
        super().sync_weights(model)

    def sleep(self):
        super().sleep()
        self.calls.append("sleep")
        self.asleep = True

    def wake(self, tags=None):
        super().wake(tags)
        self.calls.append("wake" if tags is None else "wake:" + ",".join(tags))
        self.asleep = tags == ["weights"]  # the KV cache still sleeps: no generate yet


class RecordingHF(RecordingEngine, HFEngine):
    pass


def _cfg(engine: str, model: str) -> object:
    return config_from_dict(
        {
            "agents": [{"name": "solo", "model": model}],
            "data": {"limit": 2, "problems_per_step": 2},
            "grpo": {"k": 2, "max_new_tokens": 4, "micro_batch_size": 4},
            "rollout": {"engine": engine},
            "train": {
                "reward": "rent",
                "lr": 1e-2,
                "warmup_ratio": 0,
                "scheduler": "constant",
                "max_steps": 3,
            },
        }
    )


def _cohort(cfg, adapter, model, engine) -> Cohort:
    base = generate_problems(2, seed=3)
    view = base if adapter.supports_images else [to_text_problem(p) for p in base]
    agent = Agent("solo", adapter, model, view, AgentSettings.of(cfg), engine=engine)
    return Cohort(cfg, [agent], base)


SYNCED = ["wake:weights", "sync", "wake:kv_cache"]  # the KV cache wakes after the sync
EXPECTED = ["wake", "generate", "sleep", *SYNCED, "generate", "sleep"]


def test_hf_engine_is_synced_only_when_awake_and_before_the_next_rollout():
    adapter = create_adapter("tiny-qwen2.5-vl")
    model = adapter.load_model().train()
    engine = RecordingHF(adapter, copy.deepcopy(model))  # a separate inference copy: a sync really copies
    cohort = _cohort(_cfg("hf", "tiny-qwen2.5-vl"), adapter, model, engine)
    cohort.step()
    assert engine.calls == ["wake", "generate", "sleep"]  # the sync waits for the next wake
    trained = {n: p.detach().clone() for n, p in model.named_parameters()}
    assert any(not torch.equal(trained[n], p) for n, p in engine.model.named_parameters())  # engine is stale
    metrics = cohort.step()
    assert engine.calls == EXPECTED
    assert metrics["solo"]["time/sync"] > 0
    agent = cohort.agents[0]
    agent.prepare_engine()  # the stale weights of step 2's update are synced on this wake
    for name, param in engine.model.named_parameters():
        assert torch.equal(param, dict(model.named_parameters())[name]), name


class DroppingHF(RecordingHF):
    """Sleeps like vLLM's level 2: the weights are gone (zeroed here) until the next sync."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.needs_weights = False

    def generate(self, problems, **kwargs):
        assert not self.needs_weights, "generate from dropped weights"
        return super().generate(problems, **kwargs)

    def sync_weights(self, model):
        super().sync_weights(model)
        self.needs_weights = False

    def sleep(self):
        super().sleep()
        with torch.no_grad():
            for param in self.model.parameters():
                param.zero_()
        self.needs_weights = True


def test_an_engine_that_dropped_its_weights_is_synced_on_wake_even_without_an_update():
    """Two rollouts with no update between them (a second draw of grpo.dynamic_sampling): level 1 would
    restore its backup on wake; after level 2 the agent must sync before generating."""
    adapter = create_adapter("tiny-qwen2.5")
    model = adapter.load_model().train()
    engine = DroppingHF(adapter, copy.deepcopy(model))
    agent = _cohort(_cfg("hf", "tiny-qwen2.5"), adapter, model, engine).agents[0]
    ids = list(agent.view)
    first = agent.rollout(ids, seed=3)[1]
    agent.release_engine()
    again = agent.rollout(ids, seed=3)[1]
    assert engine.calls == ["wake", "generate", "sleep", *SYNCED, "generate"]
    assert [c.ids for r in again for c in r.completions] == [c.ids for r in first for c in r.completions]


@pytest.mark.vllm
def test_vllm_engine_is_synced_only_when_awake_and_samples_the_new_weights():
    from corl_vl.rollout.vllm_engine import VLLMEngine

    class RecordingVLLM(RecordingEngine, VLLMEngine):
        pass

    adapter = create_adapter("tiny-qwen2.5")
    model = adapter.load_model().train()
    engine = RecordingVLLM(adapter, max_model_len=512)
    try:
        cohort = _cohort(_cfg("vllm", "tiny-qwen2.5"), adapter, model, engine)
        cohort.step()
        cohort.step()
        assert engine.calls == EXPECTED
        # after a sync the engine's processed logprobs are the trainer's (the weights it reloaded are current)
        agent = cohort.agents[0]
        prompts, rollouts = agent.rollout(list(cohort.base)[:2], seed=11)
        comps = [c for r in rollouts for c in r.completions]
        with torch.no_grad():
            lp = adapter.completion_logprobs(
                model, [p for p in prompts for _ in range(2)], [c.ids for c in comps]
            )
        for i, c in enumerate(comps):
            assert torch.allclose(lp.logprobs[i, : len(c.ids)], torch.tensor(c.logprobs), atol=1e-4)
    finally:
        engine.close()
