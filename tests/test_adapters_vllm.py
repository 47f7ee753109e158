"""vLLM's CPU backend builds the same prompt tokens as the HF path, for every family (one engine per family).

The adapter sends vLLM *unexpanded* token ids plus images; vLLM expands the image placeholders itself. If the
request were wrong (expanded ids, a second BOS, different processor options), vLLM's ``prompt_token_ids`` would
differ from the HF path's ids. Greedy logprobs are compared too: they equal the trainer's for every family
except Gemma-3 with images, whose vLLM CPU attention is causal over image tokens where HF is bidirectional — the
drift its default importance-ratio cap exists for. Each engine loads the family's cached tiny folder as it is on
disk (config, weights, processor), so this is also the check that vLLM serves the tiny zoo's checkpoints.
"""

from __future__ import annotations

import gc
import os

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")

import pytest
import torch
from adapter_families import PLUGINS, family_adapter
from PIL import Image

from corl_vl.data.problem import Problem

pytestmark = pytest.mark.vllm

# llama3: its template emits BOS; every installed plugin runs too
FAMILIES = ["tiny-qwen2.5-vl", "tiny-internvl3.5", "tiny-gemma3", "tiny-qwen3-vl", "tiny-llama3", *PLUGINS]


def _image(seed: int, size: tuple[int, int]) -> Image.Image:
    g = torch.Generator().manual_seed(seed)
    return Image.fromarray(
        torch.randint(0, 256, (size[1], size[0], 3), generator=g, dtype=torch.uint8).numpy()
    )


def _problems(with_images: bool) -> list[Problem]:
    images = [[_image(1, (120, 80))], [_image(2, (56, 100))]] if with_images else [[], []]
    return [
        Problem("a", "What is the shaded area?", images=images[0], choices=["12", "16"]),
        Problem("b", "Find x.", images=images[1]),
        Problem("c", "Compute 7*6 without a figure."),
    ]


@pytest.mark.parametrize("name", FAMILIES)
def test_vllm_prompt_tokens_equal_hf(name):
    from vllm import LLM, SamplingParams

    adapter = family_adapter(name)
    problems = _problems(adapter.supports_images)
    llm = LLM(
        **adapter.vllm_engine_kwargs(),
        enforce_eager=True,
        max_model_len=1024,
        seed=0,
        kv_cache_memory_bytes=256 << 20,
    )
    prompts = [adapter.encode_prompt(p) for p in problems]
    try:
        params = SamplingParams(max_tokens=5, temperature=0.0, logprobs=0)
        outputs = llm.generate([adapter.vllm_request(p) for p in prompts], params, use_tqdm=False)
    finally:
        del llm
        gc.collect()

    completions = [list(o.outputs[0].token_ids) for o in outputs]
    for prompt, output in zip(prompts, outputs):
        assert list(output.prompt_token_ids) == prompt.prompt_ids, prompt.problem_id

    model = adapter.load_model()
    with torch.no_grad():
        ours = adapter.completion_logprobs(model, prompts, completions)
    for i, (output, tokens) in enumerate(zip(outputs, completions)):
        theirs = torch.tensor([step[tok].logprob for step, tok in zip(output.outputs[0].logprobs, tokens)])
        gap = (ours.logprobs[i, : len(tokens)] - theirs).abs().max().item()
        print(f"{name} {problems[i].id}: vLLM vs trainer max |Δlogprob| = {gap:.2e}")
        drifts = name == "tiny-gemma3" and problems[i].images
        assert gap < (0.5 if drifts else 1e-3), (problems[i].id, gap)
