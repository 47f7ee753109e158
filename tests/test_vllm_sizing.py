"""vLLM sized to the job, without an engine: context length, image limit, sleep level, seed streams per rank,
the layout-free weight checksum, and which rollouts gather ZeRO-3 weights (corl_vl/rollout/sizing.py,
weight_checksum.py, corl_vl/train/agent_rollout.py)."""

from __future__ import annotations

import contextlib

import pytest
import torch
from PIL import Image

from corl_vl.config import config_from_dict
from corl_vl.data.problem import Problem
from corl_vl.errors import CorlError
from corl_vl.rollout.hf import HFEngine
from corl_vl.rollout.sizing import (
    MAX_MODEL_LEN_MARGIN,
    check_images,
    check_prompt_fits,
    default_max_model_len,
    seed_stream,
    sleep_level,
    stream_seed,
)
from corl_vl.rollout.vllm_engine import request_seeds
from corl_vl.rollout.weight_checksum import trainer_checksum, value_sum
from corl_vl.train.agent_rollout import generation_weights, vllm_sizing
from model_adapters.registry import create_adapter


def _cfg(**rollout) -> object:
    return config_from_dict(
        {
            "agents": [{"name": "solo", "model": "tiny-qwen2.5"}],
            "grpo": {"k": 2, "max_new_tokens": 24},
            "rollout": {"engine": "vllm", **rollout},
            "train": {"reward": "rent"},
        }
    )


def _text_problems() -> list[Problem]:
    return [Problem("short", "Compute 7*6."), Problem("long", "Compute " + " + ".join(["12"] * 40) + ".")]


def test_default_context_is_the_longest_prompt_plus_new_tokens_plus_the_margin():
    assert MAX_MODEL_LEN_MARGIN == 16
    assert default_max_model_len(100, 32) == 148


def test_vllm_gets_the_longest_rendered_prompt_plus_max_new_tokens_when_unset():
    adapter = create_adapter("tiny-qwen2.5")
    problems = _text_problems()
    longest = max(len(adapter.encode_prompt(p)) for p in problems)
    cfg = _cfg()
    options = vllm_sizing("solo", adapter, None, problems, cfg.rollout, cfg.grpo.max_new_tokens)
    assert options["max_model_len"] == longest + 24 + MAX_MODEL_LEN_MARGIN
    assert options["sleep_level"] == 2  # the agent syncs after every update
    assert options["max_images_per_prompt"] == 1 and options["weight_checksum"] is False


def test_a_configured_context_is_passed_as_is_and_nothing_is_rendered(monkeypatch):
    adapter = create_adapter("tiny-qwen2.5")
    monkeypatch.setattr(adapter, "encode_prompt", lambda p: pytest.fail("rendered a prompt"))
    cfg = _cfg(max_model_len=77, max_images_per_prompt=3, weight_checksum=True)
    options = vllm_sizing("solo", adapter, None, _text_problems(), cfg.rollout, cfg.grpo.max_new_tokens)
    assert (options["max_model_len"], options["max_images_per_prompt"], options["weight_checksum"]) == (
        77,
        3,
        True,
    )


def test_a_prompt_longer_than_the_configured_context_is_one_line_naming_the_problem():
    adapter = create_adapter("tiny-qwen2.5")
    prompts = [adapter.encode_prompt(p) for p in _text_problems()]
    n = len(prompts[1])
    check_prompt_fits(prompts, 24, n + 24)  # exactly fits
    with pytest.raises(CorlError) as caught:
        check_prompt_fits(prompts, 24, n + 23)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"problem 'long': a {n}-token prompt + grpo.max_new_tokens (24) exceeds ")
    assert f"rollout.max_model_len={n + 23}" in message


def test_a_problem_with_more_images_than_allowed_is_one_line_naming_it():
    pictures = [Image.new("RGB", (8, 8)) for _ in range(3)]
    problems = [Problem("one", "?", images=pictures[:1]), Problem("row-7", "?", images=pictures)]
    check_images(problems, 3)
    with pytest.raises(CorlError) as caught:
        check_images(problems, 2)
    assert str(caught.value).startswith(
        "problem 'row-7': 3 images, more than rollout.max_images_per_prompt=2;"
    )
    adapter = create_adapter("tiny-qwen2.5-vl")
    with pytest.raises(CorlError, match=r"^agent solo: problem 'row-7': 3 images") as caught:
        cfg = _cfg(max_model_len=4096, max_images_per_prompt=2)
        vllm_sizing("solo", adapter, None, problems, cfg.rollout, cfg.grpo.max_new_tokens)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("key", ["max_model_len", "max_images_per_prompt"])
def test_sizes_below_one_are_refused_before_models_load(key):
    with pytest.raises(CorlError, match=rf"^rollout\.{key}: must be ≥ 1"):
        _cfg(**{key: 0})


def test_sleep_level_two_only_when_the_weights_are_rewritten_every_step():
    assert sleep_level(weights_synced_every_step=True) == 2
    assert sleep_level(weights_synced_every_step=False) == 1


def test_no_two_ranks_of_an_agent_draw_the_same_seeds():
    k, n = 4, 3
    samples = {}
    for rank in range(2):  # two data-parallel ranks, each numbering its requests from 0
        stream = seed_stream(rank, 2)
        samples[rank] = {s + j for s in request_seeds(11, n, k, stream) for j in range(k)}
        assert len(samples[rank]) == n * k
    assert not samples[0] & samples[1]
    assert request_seeds(11, n, k) == request_seeds(11, n, k, seed_stream(0, 1)) == [11, 15, 19]


def test_ranks_of_one_tensor_parallel_group_share_a_stream():
    assert [seed_stream(r, 4, 2) for r in range(4)] == [(0, 2), (0, 2), (1, 2), (1, 2)]
    assert stream_seed(5, 3, 4, (1, 2)) == 5 + (3 * 2 + 1) * 4
    with pytest.raises(CorlError, match="does not split"):
        seed_stream(0, 3, 2)


def test_hf_engine_samples_other_completions_on_another_ranks_stream():
    adapter = create_adapter("tiny-qwen2.5")
    engine = HFEngine(adapter, adapter.load_model())
    same = [Problem("p", "Compute 7*6.")]  # the first problem of two ranks' shares, same step seed
    kw = {"k": 3, "temperature": 1.0, "max_new_tokens": 8, "seed": 5}

    def ids(**extra):
        return [c.ids for c in engine.generate(same, **kw, **extra)[0].completions]

    assert ids(seed_stream=(0, 1)) == ids()
    assert ids(seed_stream=(0, 2)) != ids(seed_stream=(1, 2))


def test_checksum_ignores_layout_and_precision_but_not_values():
    q, k = torch.randn(6, 4), torch.randn(2, 4)
    fused = torch.cat([q, k])  # vLLM's qkv_proj
    padded = torch.cat([fused, torch.zeros(3, 4)])  # a padded vocabulary
    assert value_sum([q, k]) == value_sum([fused]) == value_sum([padded.t().contiguous()])
    half = q.to(torch.bfloat16)
    assert value_sum([half]) == value_sum([half.float()])
    assert value_sum([torch.tensor([-0.0, 1.0])]) == value_sum([torch.tensor([0.0, 1.0])])
    changed = q.clone()
    changed[0, 0] += 1.0
    assert value_sum([changed, k]) != value_sum([q, k])
    assert trainer_checksum([("embed", q), ("lm_head", q), ("k", k)]) == value_sum([q, k])  # tied: once


class _Backend:
    """Only what ``generation_weights`` asks of a training backend: its gathering context."""

    def __init__(self) -> None:
        self.gathered = 0

    @contextlib.contextmanager
    def inference_weights(self):
        self.gathered += 1
        yield


class _Agent:
    def __init__(self) -> None:
        self.backend = _Backend()


@pytest.mark.parametrize(("reads", "gathers"), [(True, 1), (False, 0)])
def test_weights_are_gathered_for_a_rollout_only_when_the_engine_reads_the_module(reads, gathers):
    agent = _Agent()
    engine = type("Engine", (), {"reads_trainer_weights": reads})()
    with generation_weights(agent, engine):
        pass
    assert agent.backend.gathered == gathers
    assert HFEngine.reads_trainer_weights is True


def test_the_plans_kv_cache_is_sized_at_the_engines_context():
    from corl_vl.plan import plan_for_config
    from corl_vl.plan.arithmetic import GIB
    from model_adapters.model_facts import ModelFacts

    # 2 layers, 1 KV head of 4, bf16: 2 · 2 · 1 · 4 · 2 = 32 KV bytes per token; no image
    facts = ModelFacts(
        parameters=1000,
        vision_parameters=0,
        hidden=8,
        layers=2,
        heads=2,
        kv_heads=1,
        head_dim=4,
        intermediate=16,
        vocab=50,
        vision_hidden=4,
        vision_layers=0,
        vision_intermediate=8,
        image_tokens=0,
        vision_tokens=0,
    )
    raw = {
        "agents": [{"name": "a", "model": "tiny-qwen2.5", "adapter_kwargs": {"dtype": "bfloat16"}}],
        "grpo": {"k": 2, "max_new_tokens": 4},
        "data": {"problems_per_step": 3},
        "rollout": {"engine": "vllm"},
        "train": {"reward": "rent"},
    }

    def needed(**rollout):
        cfg = config_from_dict({**raw, "rollout": {"engine": "vllm", **rollout}})
        return plan_for_config(cfg, 1, 80 * GIB, facts_for=lambda _: facts).agents[0].vllm_needed

    fixed = 1000 * 2 + 3 * GIB // 2  # weights + the engine's overhead (graphs, activations, sampler)
    # unset: the plan's prompt estimate (256 text tokens) + 4 new tokens + the margin, for one full sequence
    # (vLLM queues the other 3 × 2 - 1 when its KV cache holds fewer)
    assert needed() == fixed + 32 * (256 + 4 + MAX_MODEL_LEN_MARGIN)
    assert needed(max_model_len=1000) == fixed + 32 * 1000
