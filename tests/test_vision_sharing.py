"""One vision pass per problem: rows of one problem share one encoding of its picture per micro-batch.

What the math guarantees: a row's image features do not depend on the other images the tower encodes with it
(attention inside the tower is per image), so the shared encoding gives every row the same features, hence the
same logprobs and entropies (fp32, up to summation order), and the tower's gradient, the sum over the rows of
their gradients through the features, equals the per-row encoding's. A hook on the tower counts what it encodes.
"""

from __future__ import annotations

import pytest
import torch
from adapter_families import PLUGINS, family_adapter
from PIL import Image

from corl_vl.data.problem import Problem

FAMILIES = [
    "tiny-qwen2.5-vl",
    "tiny-qwen3-vl",
    "tiny-qwen3-vl-moe",
    "tiny-internvl3.5",
    "tiny-gemma3",
    *PLUGINS,
]
TOL = 1e-5
K = 3


def _image(seed: int, size: tuple[int, int]) -> Image.Image:
    g = torch.Generator().manual_seed(seed)
    return Image.fromarray(
        torch.randint(0, 256, (size[1], size[0], 3), generator=g, dtype=torch.uint8).numpy()
    )


def _tower(model):
    """The vision tower module and how many images one call's inputs hold."""
    inner = model.model
    if hasattr(inner, "visual"):  # Qwen: patches of all images, split by grid_thw
        return inner.visual, lambda args, kwargs: int(kwargs["grid_thw"].shape[0])
    tower = getattr(inner, "vision_tower", None) or inner.vision_model

    def images(args, kwargs):
        pixels = kwargs.get("pixel_values", args[0] if args else None)
        return int(pixels.shape[0])

    return tower, images


@pytest.fixture(scope="module", params=FAMILIES)
def family(request):
    adapter = family_adapter(request.param, dtype="float32")
    model = adapter.load_model()
    problems = [
        Problem("a", "What is the area of the shaded region?", images=[_image(1, (120, 80))]),
        Problem("b", "Find x.", images=[_image(2, (56, 100))]),
        Problem("c", "Compute 7*6."),
    ]
    prompts = [adapter.encode_prompt(p) for p in problems for _ in range(K)]  # K rows share one encoding
    g = torch.Generator().manual_seed(0)
    lengths = [5, 2, 7, 3, 6, 1, 4, 4, 2]
    completions = [torch.randint(5, 60, (n,), generator=g).tolist() for n in lengths]
    return adapter, model, prompts, completions


def _run(adapter, model, prompts, completions, *, share: bool, micro_batch_size: int):
    """Logprobs, entropies, every parameter's gradient of a loss using both, and the images the tower saw."""
    tower, count = _tower(model)
    seen: list[int] = []
    handle = tower.register_forward_pre_hook(lambda m, a, kw: seen.append(count(a, kw)), with_kwargs=True)
    adapter.share_vision_pass = share
    adapter.pop_vision_images_encoded()
    model.zero_grad(set_to_none=True)
    try:
        out = adapter.completion_logprobs(
            model, prompts, completions, micro_batch_size=micro_batch_size, with_entropy=True
        )
        weights = torch.linspace(-1.0, 1.0, out.logprobs.numel()).reshape(out.logprobs.shape)
        ((out.logprobs * weights * out.mask).sum() + 0.1 * (out.entropy * out.mask).sum()).backward()
    finally:
        handle.remove()
        adapter.share_vision_pass = True
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return out, grads, seen, adapter.pop_vision_images_encoded()


@pytest.mark.parametrize("micro_batch_size", [K, 4, 9])
def test_shared_encoding_equals_per_row(family, micro_batch_size):
    adapter, model, prompts, completions = family
    assert adapter.image_feature_units(prompts[0]) is not None  # the family opted in
    ref, ref_grads, ref_seen, ref_count = _run(
        adapter, model, prompts, completions, share=False, micro_batch_size=micro_batch_size
    )
    out, grads, seen, count = _run(
        adapter, model, prompts, completions, share=True, micro_batch_size=micro_batch_size
    )
    assert torch.equal(out.mask, ref.mask)
    assert torch.allclose(out.logprobs, ref.logprobs, atol=TOL, rtol=0)
    assert torch.allclose(out.entropy, ref.entropy, atol=TOL, rtol=0)
    assert torch.allclose(out.self_certainty, ref.self_certainty, atol=TOL, rtol=0)
    assert grads.keys() == ref_grads.keys()
    vision = set(adapter.vision_parameter_names(model))
    assert vision & grads.keys()  # the tower got gradients both ways
    for name, grad in ref_grads.items():
        scale = max(1.0, float(grad.abs().max()))
        assert torch.allclose(grads[name], grad, atol=TOL * scale, rtol=1e-4), name
    # rows in order: K of problem a, K of b, K text-only; the per-row path encodes each row's image
    units = [adapter.image_feature_units(p) if p.mm_inputs else 0 for p in prompts]  # tower entries per row
    batches = [range(s, min(s + micro_batch_size, 3 * K)) for s in range(0, 3 * K, micro_batch_size)]
    groups = [{i // K for i in rows if units[i]} for rows in batches]  # problems with a picture, per batch
    assert ref_seen == [sum(units[i] for i in rows) for rows in batches if any(units[i] for i in rows)]
    assert seen == [sum(units[g * K] for g in gs) for gs in groups if gs]  # once per problem per batch
    assert ref_count == 2 * K and count == sum(len(gs) for gs in groups)  # images (the metric's count)


def test_without_the_hook_every_row_encodes(family):
    """A family (or plug-in) that has not opted in keeps the per-row path: same numbers, K× the images."""
    adapter, model, prompts, completions = family
    hook = type(adapter).image_feature_units
    type(adapter).image_feature_units = lambda self, prompt: None
    try:
        _, _, seen, count = _run(adapter, model, prompts, completions, share=True, micro_batch_size=9)
    finally:
        type(adapter).image_feature_units = hook
    units = adapter.image_feature_units(prompts[0]) + adapter.image_feature_units(prompts[K])
    assert seen == [K * units] and count == 2 * K
