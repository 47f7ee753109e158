"""Prompts, images, tokens and family defaults of every adapter (processors only; no forward passes)."""

from __future__ import annotations

import math

import pytest
import torch
from adapter_families import FAMILIES, VLMS, family_adapter
from PIL import Image

from corl_vl.data.problem import Problem
from corl_vl.errors import CorlError
from model_adapters import ImageOptions, ModelAdapter, create_adapter, format_question

INSTRUCTION = " Please reason step by step, and put your final answer within \\boxed{}."
STOP_TOKEN = {  # the end-of-turn token each chat template closes the assistant turn with
    "tiny-qwen2.5-vl": "<|im_end|>",
    "tiny-internvl3.5": "<|im_end|>",
    "tiny-gemma3": "<end_of_turn>",
    "tiny-qwen2.5": "<|im_end|>",
    "tiny-llama3": "<|eot_id|>",
    "tiny-qwen3": "<|im_end|>",
    "tiny-qwen3-vl": "<|im_end|>",
}  # a plugin's: its tokenizer's EOS


@pytest.fixture(scope="module")
def adapters():
    return {name: family_adapter(name) for name in FAMILIES}


def _image(size: tuple[int, int], mode: str = "RGB") -> Image.Image:
    g = torch.Generator().manual_seed(sum(size))
    pixels = torch.randint(0, 256, (size[1], size[0], 3), generator=g, dtype=torch.uint8).numpy()
    return Image.fromarray(pixels).convert(mode)


def _problem(adapter, **kw) -> Problem:
    images = [_image((90, 60), "RGBA")] if adapter.supports_images else []
    return Problem("q1", "Which is bigger?", images=images, choices=["3/4", "0.7"], **kw)


def test_question_format_is_shared():
    problem = Problem("q1", "  Which is bigger? ", choices=["3/4", "0.7"])
    assert format_question(problem) == "Which is bigger?\nA. 3/4\nB. 0.7" + INSTRUCTION
    assert format_question(Problem("q2", "2+2?")) == "2+2?" + INSTRUCTION
    assert format_question(Problem("q2", "2+2?"), "none") == "2+2?"
    with pytest.raises(CorlError, match="unknown answer_format 'xml'"):
        format_question(problem, "xml")


@pytest.mark.parametrize("name", FAMILIES)
def test_prompt_ids_equal_hf_chat_template_path(adapters, name):
    """The adapter's ids/pixels equal HF ``apply_chat_template(tokenize=True)`` (which handles BOS itself)."""
    adapter = adapters[name]
    problem = _problem(adapter)
    prompt = adapter.encode_prompt(problem)
    images = [adapter.prepare_image(im) for im in problem.images]
    extra = {"processor_kwargs": adapter.processor_kwargs()} if images else {}
    reference = adapter.processor.apply_chat_template(
        adapter.build_messages(problem, images),
        add_generation_prompt=True,
        tokenize=True,
        return_dict=True,
        return_tensors="pt",
        **adapter.template_variables(),
        **extra,
    )
    assert prompt.prompt_ids == reference["input_ids"][0].tolist()
    assert "Which is bigger?\nA. 3/4\nB. 0.7" + INSTRUCTION in prompt.prompt_text
    for key, value in prompt.mm_inputs.items():
        assert torch.equal(value, reference[key]), key
    assert bool(prompt.mm_inputs) == adapter.supports_images
    bos = adapter.tokenizer.bos_token_id
    if adapter.tokenizer.bos_token and prompt.prompt_text.startswith(adapter.tokenizer.bos_token):
        assert prompt.prompt_ids[0] == bos and prompt.prompt_ids[1] != bos  # exactly one BOS (Gemma, Llama-3)
    if adapter.supports_images:
        image_id = adapter.tokenizer.convert_tokens_to_ids(adapter.image_token)
        assert prompt.prompt_ids.count(image_id) > 1  # expanded: what the model sees


@pytest.mark.parametrize("name", FAMILIES)
def test_stop_tokens_pad_and_decode(adapters, name):
    adapter = adapters[name]
    tok = adapter.tokenizer
    stop = STOP_TOKEN.get(name, tok.eos_token)
    assert tok.convert_tokens_to_ids(stop) in adapter.stop_token_ids
    assert tok.eos_token_id in adapter.stop_token_ids
    assert isinstance(adapter.pad_token_id, int)
    ids = tok("The answer is 42.", add_special_tokens=False)["input_ids"]
    text = adapter.decode([*ids, tok.convert_tokens_to_ids(stop)])
    assert text == "The answer is 42."  # no special tokens, no leaked "▁"


def test_family_defaults(adapters):
    # IS truncation is on for every family (docs/training.md, "Importance-ratio truncation")
    assert all(adapters[n].importance_ratio_cap == 2.0 for n in FAMILIES)
    assert adapters["tiny-internvl3.5"].processor_kwargs() == {"crop_to_patches": False}
    assert adapters["tiny-gemma3"].processor_kwargs() == {"do_pan_and_scan": False}


def test_text_adapter_rejects_images(adapters):
    problem = Problem("img1", "What is shown?", images=[_image((10, 10))])
    with pytest.raises(CorlError, match="problem img1: has images but adapter 'causal_lm' is text-only"):
        adapters["tiny-qwen2.5"].encode_prompt(problem)


@pytest.mark.parametrize("name", VLMS)
def test_broken_image_names_the_file(adapters, name, tmp_path):
    path = tmp_path / "broken.png"
    path.write_bytes(b"\x89PNG not really")
    with pytest.raises(CorlError, match=r"cannot read image .*broken\.png"):
        adapters[name].encode_prompt(Problem("b", "?", images=[path]))


def test_qwen_images_snap_to_grid_within_bounds(tiny_checkpoint):
    adapter = create_adapter("tiny-qwen2.5-vl")
    size = adapter.processor.image_processor.size
    for wh in [(2000, 1000), (90, 60), (20, 300)]:
        image = adapter.prepare_image(_image(wh))
        assert image.width % 28 == 0 and image.height % 28 == 0
        assert size["shortest_edge"] <= image.width * image.height <= size["longest_edge"]
        assert abs(math.log(image.width / image.height) - math.log(wh[0] / wh[1])) < 0.5
    # user bounds reach both the resize and the processor: the grid follows the prepared image exactly
    custom = create_adapter("tiny-qwen2.5-vl", image_options=ImageOptions(max_pixels=28 * 28 * 8))
    image = _image((400, 200))
    prompt = custom.encode_prompt(Problem("c", "?", images=[image]))
    t, h, w = prompt.mm_inputs["image_grid_thw"][0].tolist()
    # 400×200 with ≤ 6272 pixels on a 28 grid, aspect 2:1 → 112×56
    assert custom.prepare_image(image).size == (112, 56) == (w * 14, h * 14) and t == 1
    assert custom.processor_kwargs() == {
        "size": {"shortest_edge": size["shortest_edge"], "longest_edge": 6272}
    }


def test_long_side_cap_applies_before_family_resize(tiny_checkpoint):
    adapter = create_adapter("tiny-internvl3.5", image_options=ImageOptions(max_long_side=32))
    assert ImageOptions.__dataclass_fields__["max_long_side"].default == 1024
    base = ModelAdapter.prepare_image(adapter, _image((100, 50)))  # before InternVL's own 64² resize
    assert base.size == (32, 16)


def test_internvl_tiling_is_configurable(tiny_checkpoint):
    image = _image((256, 64))  # 4:1 → several tiles when tiling is on
    one = create_adapter("tiny-internvl3.5").encode_prompt(Problem("t", "?", images=[image]))
    tiled_adapter = create_adapter("tiny-internvl3.5", crop_to_patches=True, max_patches=6)
    tiled = tiled_adapter.encode_prompt(Problem("t", "?", images=[image]))
    context = tiled_adapter.tokenizer.convert_tokens_to_ids("<IMG_CONTEXT>")
    assert one.mm_inputs["pixel_values"].shape[0] == 1
    tiles = tiled.mm_inputs["pixel_values"].shape[0]
    assert 2 < tiles <= 7  # up to max_patches tiles + a thumbnail
    seq = tiled_adapter.processor.image_seq_length
    assert (one.prompt_ids.count(context), tiled.prompt_ids.count(context)) == (seq, seq * tiles)
    with pytest.raises(CorlError, match="max_patches must be a positive integer"):
        create_adapter("tiny-internvl3.5", max_patches=0)


def test_rollout_logprob_containment(adapters):
    rollout = torch.tensor([[-0.5, float("nan"), -1.0], [float("-inf"), -0.2, float("nan")]])
    trainer = torch.tensor([[-0.4, -0.9, -1.1], [-2.0, -0.3, -0.7]])
    mask = torch.tensor([[True, True, True], [True, True, False]])
    fixed, replaced = adapters["tiny-gemma3"].contain_rollout_logprobs(rollout, trainer, mask)
    assert torch.equal(fixed, torch.tensor([[-0.5, -0.9, -1.0], [-2.0, -0.2, 0.0]]))
    assert replaced.tolist() == [[False, True, False], [True, False, False]]
    # every family contains by default (a missing vLLM logprob arrives as NaN); one that opts out raises
    fixed, _ = adapters["tiny-qwen2.5-vl"].contain_rollout_logprobs(rollout, trainer, mask)
    assert torch.isfinite(fixed).all()
    strict = create_adapter("tiny-qwen2.5-vl")
    strict.contain_nonfinite_rollout_logprobs = False
    with pytest.raises(RuntimeError, match="2 non-finite rollout logprobs"):
        strict.contain_rollout_logprobs(rollout, trainer, mask)
    clean = torch.tensor([[-0.5, -0.1]])
    out, replaced = adapters["tiny-qwen2.5"].contain_rollout_logprobs(
        clean, clean * 2, torch.ones(1, 2, dtype=bool)
    )
    assert torch.equal(out, clean) and not replaced.any()


def test_gemma_zero3_guard_skips_zero_size_padding_row(adapters):
    """Under ZeRO-3 a partitioned embedding weight has zero elements; zeroing its padding row must not crash."""
    from model_adapters.gemma3 import zero_size_embedding_guard

    model = adapters["tiny-gemma3"].load_model()
    emb = torch.nn.Embedding(10, 4, padding_idx=3)
    emb.weight = torch.nn.Parameter(torch.empty(0))  # what a ZeRO-3 shard looks like at init
    with pytest.raises(IndexError):
        model._init_weights(emb)
    with zero_size_embedding_guard():
        model._init_weights(emb)
        assert emb.padding_idx == 3
        full = torch.nn.Embedding(10, 4, padding_idx=3)
        model._init_weights(full)  # a normal embedding still gets its padding row zeroed
        assert torch.all(full.weight[3] == 0) and full.weight.abs().sum() > 0
    with pytest.raises(IndexError):  # the patch is undone afterwards
        model._init_weights(emb)


def test_vllm_request_shape(adapters):
    qwen = adapters["tiny-qwen2.5-vl"]
    prompt = qwen.encode_prompt(_problem(qwen))
    request = qwen.vllm_request(prompt)  # built from the one rendering, never a new one
    pad = qwen.tokenizer.convert_tokens_to_ids("<|image_pad|>")
    assert request["prompt_token_ids"].count(pad) == 1  # unexpanded: vLLM expands it itself
    assert request["prompt_token_ids"] == prompt.request_ids
    assert request["multi_modal_data"]["image"] is prompt.images[0]
    assert prompt.images[0].size == qwen.prepare_image(_image((90, 60))).size
    llama = adapters["tiny-llama3"]
    text_prompt = llama.encode_prompt(_problem(llama))
    text = llama.vllm_request(text_prompt)
    assert set(text) == {"prompt_token_ids"}
    assert text["prompt_token_ids"] == text_prompt.prompt_ids == text_prompt.request_ids
    with pytest.raises(TypeError, match="PromptInputs of encode_prompt"):
        llama.vllm_request(_problem(llama))
    assert adapters["tiny-qwen2.5"].vllm_engine_kwargs()["limit_mm_per_prompt"] == {"image": 0}
    assert adapters["tiny-gemma3"].vllm_engine_kwargs(max_images_per_prompt=2)["limit_mm_per_prompt"] == {
        "image": 2
    }
