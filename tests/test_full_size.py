"""Full-size presets: the published architectures from configs in the repo (parameter counts on the meta device,
never allocated), and a width-only variant that really builds at real width and runs."""

from __future__ import annotations

import pytest
import torch
from PIL import Image

from corl_vl.data.problem import Problem
from corl_vl.errors import CorlError
from model_adapters import create_adapter
from model_adapters.full_size import make_config, parameter_count, split_name
from model_adapters.presets import all_presets, full_size_specs


@pytest.mark.parametrize("name", list(full_size_specs()))
def test_full_size_parameter_count_is_the_model_cards(name):
    # model cards round to 2–3 significant digits (InternVL3.5-2B: "2.3B" for 2.35 B)
    count = parameter_count(f"{name}@random")
    assert count / 1e9 == pytest.approx(full_size_specs()[name].published_parameters, rel=0.025)


def test_qwen2_5_vl_3b_by_hand():
    # 36 layers × (attention 2048² ·2 + 2048·256 ·2 + biases 2048+512, MLP 3 · 2048 · 11008, 2 norms)
    # + tied embedding 151,936 × 2048 + final norm + vision tower (32 blocks, merger, patch embedding)
    layer = 2 * 2048 * 2048 + 2 * 2048 * 256 + 2048 + 2 * 256 + 3 * 2048 * 11008 + 2 * 2048
    text = 36 * layer + 151_936 * 2048 + 2048
    block = 1280 * 3840 + 3840 + 1280 * 1280 + 1280 + 2 * (1280 * 3420 + 3420) + 3420 * 1280 + 1280 + 2 * 1280
    merger = 1280 + 5120 * 5120 + 5120 + 5120 * 2048 + 2048
    vision = 32 * block + merger + 3 * 2 * 14 * 14 * 1280
    assert parameter_count("qwen2.5-vl-3b@random") == text + vision


# real presets whose published config values are not written in their family's full_size.py yet (docs/adapters.md)
WITHOUT_FULL_SIZE = {
    *(f"qwen3-vl-{size}" for size in ("2b", "4b", "8b", "32b")),
    *(f"qwen3-vl-{size}" for size in ("30b-a3b", "235b-a22b")),
}


def test_every_real_preset_has_both_variants():
    real = [p for p in all_presets().values() if p.hub_id]
    assert {p.name for p in real} >= WITHOUT_FULL_SIZE
    for preset in real:
        for variant in ("random", "width-only"):
            name = f"{preset.name}@{variant}"
            if preset.name in WITHOUT_FULL_SIZE:
                assert name not in all_presets()
                continue
            assert all_presets()[name].adapter == preset.adapter


def test_width_only_keeps_every_width():
    full, _, _, _ = make_config("gemma-3-4b@random")
    width, _, _, _ = make_config("gemma-3-4b@width-only")
    for key in ("hidden_size", "vocab_size", "intermediate_size", "head_dim", "num_key_value_heads"):
        assert getattr(width.text_config, key) == getattr(full.text_config, key)
    assert width.vision_config.hidden_size == full.vision_config.hidden_size == 1152
    assert (full.text_config.num_hidden_layers, width.text_config.num_hidden_layers) == (34, 2)
    assert width.vision_config.num_hidden_layers == 1


def test_unknown_variant_is_one_clear_error():
    with pytest.raises(CorlError, match=r"unknown full-size preset 'qwen2\.5-vl-3b@huge'"):
        split_name("qwen2.5-vl-3b@huge")


def _prompt_of_a_300x200_image(adapter):
    # 300×200 → smart_resize to 308×196 (multiples of 28) → 22×14 patches of 14 → merged 2×2 → 11×7 = 77 tokens
    prompt = adapter.encode_prompt(
        Problem("p", "What is it?", images=[Image.new("RGB", (300, 200), (9, 8, 7))])
    )
    assert sum(t in adapter.placeholder_token_ids for t in prompt.prompt_ids) == 77
    return prompt


@pytest.fixture(scope="module")
def width_only_bf16():
    """The width-only 3B in bf16, built once (a random init of ~0.5 B parameters takes ~20 s on one thread)."""
    adapter = create_adapter("qwen2.5-vl-3b@width-only", dtype="bfloat16")
    return adapter, adapter.load_model()


@pytest.mark.slow
def test_width_only_builds_runs_and_uses_the_real_image_processor(width_only_bf16):
    adapter, model = width_only_bf16
    assert model.dtype == torch.bfloat16
    assert model.config.text_config.hidden_size == 2048
    assert model.get_output_embeddings().out_features == 151_936
    prompt = _prompt_of_a_300x200_image(adapter)
    out = adapter.completion_logprobs(model, [prompt], [[5, 6, 7]])
    # its backward: the next test (and the bf16 LM-head tail's: tests/test_tail_fp32_accumulation.py)
    assert torch.isfinite(out.logprobs).all()
    assert adapter.vllm_engine_kwargs()["load_format"] == "dummy"  # no weights on disk: the sync brings them


@pytest.mark.slow
def test_width_only_backward_reaches_the_vision_tower_at_full_width(width_only_bf16):
    """The whole backward, LM head to patch embedding, at every real width. In fp32: without AVX-512 bf16, the
    CPU's bf16 matmuls in a backward's layouts run 25–100× slower than fp32 (5–10 minutes against ~15 s).
    The fp32 model is a copy of the shared bf16 one (random weights either way; a second init costs ~20 s)."""
    import copy

    adapter = create_adapter("qwen2.5-vl-3b@width-only", dtype="float32")
    model = copy.deepcopy(width_only_bf16[1]).float()
    assert all(p.dtype == torch.float32 for p in model.parameters())
    assert model.get_output_embeddings().out_features == 151_936
    out = adapter.completion_logprobs(model, [_prompt_of_a_300x200_image(adapter)], [[5, 6, 7]])
    out.logprobs.sum().backward()
    assert torch.isfinite(out.logprobs).all()
    assert model.model.visual.patch_embed.proj.weight.grad is not None
    assert torch.isfinite(model.model.visual.patch_embed.proj.weight.grad).all()
