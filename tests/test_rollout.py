"""HF rollout engine: processed logprobs equal the trainer's, seeded determinism, weights synced after a step."""

from __future__ import annotations

import copy

import pytest
import torch

from corl_vl.data.synth import generate_problems
from corl_vl.rollout import cut_at_stop
from corl_vl.rollout.hf import HFEngine


@pytest.fixture(scope="module")
def vlm():
    from model_adapters.registry import create_adapter

    adapter = create_adapter("tiny-qwen2.5-vl")
    return adapter, adapter.load_model(), generate_problems(2, seed=1)


def _flat(rollouts):
    return [c for r in rollouts for c in r.completions]


def test_processed_logprobs_match_trainer_and_seed_determinism(vlm):
    adapter, model, problems = vlm
    engine = HFEngine(adapter, model, batch_size=3)  # 2 problems × 2 = 4 rows → two generate calls
    kw = {"k": 2, "temperature": 0.7, "top_p": 1.0, "max_new_tokens": 6}
    rollouts = engine.generate(problems, seed=5, **kw)
    assert [r.problem_id for r in rollouts] == [p.id for p in problems]
    comps = _flat(rollouts)
    assert all(len(c.ids) == len(c.logprobs) and 1 <= len(c.ids) <= 6 for c in comps)
    prompts = [adapter.encode_prompt(p) for p in problems for _ in range(2)]
    with torch.no_grad():
        trainer = adapter.completion_logprobs(model, prompts, [c.ids for c in comps], temperature=0.7)
    for i, c in enumerate(comps):
        assert torch.allclose(trainer.logprobs[i, : len(c.ids)], torch.tensor(c.logprobs), atol=1e-4)
    again = _flat(engine.generate(problems, seed=5, **kw))
    assert [c.ids for c in again] == [c.ids for c in comps]
    other = _flat(engine.generate(problems, seed=6, **kw))
    assert [c.ids for c in other] != [c.ids for c in comps]


def test_engine_equals_trained_model_after_step_and_sync(vlm):
    adapter, model, problems = vlm
    trainer = copy.deepcopy(model).train()
    engine = HFEngine(adapter, copy.deepcopy(model))  # a separate inference copy: sync must copy weights
    greedy = {"k": 1, "temperature": 0.0, "max_new_tokens": 5, "seed": 0}
    prompts = [adapter.encode_prompt(p) for p in problems]
    target = [c.ids for c in _flat(engine.generate(problems, **greedy))]

    opt = torch.optim.AdamW(trainer.parameters(), lr=5e-2)
    loss = adapter.completion_logprobs(trainer, prompts, target).logprobs.sum()  # push these tokens down
    loss.backward()
    opt.step()

    stale = _flat(engine.generate(problems, **greedy))
    reference = _flat(HFEngine(adapter, trainer).generate(problems, **greedy))
    gap = max(abs(a - b) for s, r in zip(stale, reference) for a, b in zip(s.logprobs, r.logprobs))
    assert gap > 1e-3  # before the sync the engine still samples from the old weights
    engine.sync_weights(trainer)
    synced = _flat(engine.generate(problems, **greedy))
    assert [c.ids for c in synced] == [c.ids for c in reference]
    with torch.no_grad():
        lp = adapter.completion_logprobs(trainer, prompts, [c.ids for c in synced])
    for i, c in enumerate(synced):
        assert torch.allclose(lp.logprobs[i, : len(c.ids)], torch.tensor(c.logprobs), atol=1e-4)


def test_cut_at_stop_keeps_the_stop_token():
    assert cut_at_stop([5, 6, 2, 9, 2], [2, 7]) == ([5, 6, 2], "stop")
    assert cut_at_stop([5, 6, 9], [2]) == ([5, 6, 9], "length")
    assert cut_at_stop([7], [2, 7]) == ([7], "stop")
    assert cut_at_stop([5, 9, 6, 2], [2], forbidden=[9]) == ([5], "invalid")  # an image slot sampled as text
