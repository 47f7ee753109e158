"""HF rollouts prefill a problem's prompt and picture once for its K samples (``HFEngine._shared_prefix``): the
sampled tokens and their logprobs equal the K-fold prefill's under the same seed (and greedy), and the vision
tower encodes each picture once per generate call instead of K times.

Tiny randomly initialised models of the real architectures (model_adapters/tiny.py).
"""

from __future__ import annotations

import pytest
import torch

from corl_vl.data.synth import generate_problems, to_text_problem
from corl_vl.rollout.hf import HFEngine
from model_adapters.registry import create_adapter

FAMILIES = ["tiny-qwen2.5", "tiny-qwen2.5-vl", "tiny-qwen3-vl", "tiny-internvl3.5", "tiny-gemma3"]


def _tower(model):
    names = ("visual", "vision_tower", "vision_model")
    found = [(n, m) for n, m in model.named_modules() if n.rsplit(".", 1)[-1] in names]
    return min(found, key=lambda item: len(item[0]))[1] if found else None


def _rollouts(engine, problems, prompts, temperature):
    return engine.generate(
        problems, k=3, temperature=temperature, max_new_tokens=6, seed=11, prompts=prompts, min_new_tokens=6
    )


@pytest.mark.parametrize("name", FAMILIES)
def test_one_prefill_per_prompt_samples_what_k_prefills_sample(name):
    adapter = create_adapter(name)
    torch.manual_seed(0)
    model = adapter.load_model().eval()
    problems = generate_problems(2, seed=3)
    if name == "tiny-qwen2.5":
        problems = [to_text_problem(p) for p in problems]
    prompts = [adapter.encode_prompt(p) for p in problems]
    images = []
    tower = _tower(model)
    if tower is not None:
        # rows of the tower's input (patches or pictures): proportional to the pictures it encodes
        def count(_module, args, kwargs):
            first = args[0] if args else next(v for v in kwargs.values() if isinstance(v, torch.Tensor))
            images.append(int(first.shape[0]))

        tower.register_forward_pre_hook(count, with_kwargs=True)
    shared, plain = HFEngine(adapter, model), HFEngine(adapter, model, share_prompt=False)
    for temperature in (1.0, 0.0):  # seeded sampling and greedy
        images.clear()
        got = _rollouts(shared, problems, prompts, temperature)
        shared_calls = list(images)
        images.clear()
        want = _rollouts(plain, problems, prompts, temperature)
        for g, w in zip(got, want):
            assert [c.ids for c in g.completions] == [c.ids for c in w.completions]
            for cg, cw in zip(g.completions, w.completions):
                assert torch.allclose(torch.tensor(cg.logprobs), torch.tensor(cw.logprobs), atol=1e-4)
        if (
            tower is not None
        ):  # one tower call per generate call either way, with each picture once, not K times
            assert len(shared_calls) == len(images) == 1
            assert 3 * shared_calls[0] == images[0]
