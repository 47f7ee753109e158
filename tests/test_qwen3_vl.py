"""Qwen3-VL as a built-in family: presets, prompt layout, its 32-pixel grid and M-RoPE field, `adapters check`,
and a 2-step cohort beside Qwen2.5-VL (answers forced as in tests/test_cohort.py: random models write none)."""

from __future__ import annotations

import json
import math

import pytest
import torch
from PIL import Image
from test_cohort import TINY, ForcedTexts, boxed

from corl_vl.cli import main as cli_main
from corl_vl.config import apply_overrides, config_from_dict
from corl_vl.data.problem import Problem
from corl_vl.train.cohort import Cohort
from model_adapters import create_adapter, detect_adapter
from model_adapters.presets import all_presets
from model_adapters.qwen3_vl import Qwen3VLAdapter

Q = "Which is bigger?\nA. 3/4\nB. 0.7 Please reason step by step, and put your final answer within \\boxed{}."


@pytest.fixture(scope="module")
def adapter():
    return create_adapter("tiny-qwen3-vl")


def _problem(size=(90, 60)) -> Problem:
    return Problem("q1", "Which is bigger?", images=[Image.new("RGB", size, "red")], choices=["3/4", "0.7"])


def test_presets_name_the_released_dense_sizes_and_folders_are_detected(tiny_checkpoint):
    for size in ("2B", "4B", "8B", "32B"):
        preset = all_presets()[f"qwen3-vl-{size.lower()}"]
        assert (preset.adapter, preset.hub_id) == ("qwen3_vl", f"Qwen/Qwen3-VL-{size}-Instruct")
    assert detect_adapter(tiny_checkpoint("tiny-qwen3-vl")) == "qwen3_vl"


def test_prompt_layout_has_no_default_system_turn(adapter):
    """Unlike Qwen2.5-VL's template, Qwen3-VL's opens with the user turn unless a system prompt is given."""
    user = (
        f"<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>{Q}<|im_end|>\n<|im_start|>assistant\n"
    )
    assert adapter.encode_prompt(_problem()).prompt_text == user
    with_system = create_adapter("tiny-qwen3-vl", system_prompt="Be brief.").render_prompt(_problem())[0]
    assert with_system == "<|im_start|>system\nBe brief.<|im_end|>\n" + user


def test_images_snap_to_the_32_pixel_grid_and_give_one_token_per_merged_patch(adapter):
    image_id = adapter.tokenizer.convert_tokens_to_ids("<|image_pad|>")
    for size in [(90, 60), (300, 20), (10, 10), (250, 250)]:
        prompt = adapter.encode_prompt(_problem(size))
        (width, height) = prompt.images[0].size
        assert width % 32 == 0 and height % 32 == 0, size
        assert 4 * 32 * 32 <= width * height <= 64 * 32 * 32, size  # the tiny checkpoint's pixel bounds
        assert prompt.prompt_ids.count(image_id) == (width // 32) * (height // 32)
        assert math.prod(prompt.mm_inputs["image_grid_thw"][0].tolist()) == 4 * prompt.prompt_ids.count(
            image_id
        )


def test_every_forward_carries_the_mm_token_type_ids_mrope_needs(adapter):
    """transformers refuses Qwen3-VL image inputs without ``mm_token_type_ids`` (its M-RoPE is built from
    them); the adapter's batches carry them, 1 exactly on image tokens, completion tokens included."""
    prompt = adapter.encode_prompt(_problem())
    batch = adapter.training_batch([prompt], [[11, 12]])
    ids = batch.inputs["input_ids"]
    image_id = adapter.tokenizer.convert_tokens_to_ids("<|image_pad|>")
    assert torch.equal(batch.inputs["mm_token_type_ids"], (ids == image_id).int())
    model = adapter.load_model()
    without = {k: v for k, v in batch.inputs.items() if k != "mm_token_type_ids"}
    with pytest.raises(ValueError, match="mm_token_type_ids"), torch.no_grad():
        model(**without)


def test_adapters_check_passes(tiny_checkpoint, capsys):
    assert cli_main(["adapters", "check", str(tiny_checkpoint("tiny-qwen3-vl")), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["adapter"] == "qwen3_vl" and report["ok"]
    image = next(p for p in report["prompts"] if p["images"] == 1)
    assert image["image_tokens"] > 0 and image["bos_count"] == 0


def test_two_step_cohort_with_qwen2_5_vl_trains_rows_of_both():
    raw = {
        "agents": [
            {"name": "qwen25", "model": "tiny-qwen2.5-vl"},
            {"name": "qwen3", "model": "tiny-qwen3-vl"},
        ],
        "reward": {"topology": "mutual"},
        "data": {"train": "synthetic", "limit": 4, "problems_per_step": 2},
        "grpo": {"k": 4, "max_new_tokens": 6},
        "rollout": {"engine": "hf"},
        "train": {"max_steps": 2, "output_dir": "unused"},
    }
    cohort = Cohort.from_config(apply_overrides(config_from_dict(raw), TINY))
    first, second = cohort.agents
    assert isinstance(second.adapter, Qwen3VLAdapter)
    first.engine = ForcedTexts(first.engine, boxed(3, 5, 5, 5))  # its own majority 5: the label for qwen3
    second.engine = ForcedTexts(second.engine, boxed(3, 3, 3, 5))  # its own majority 3: the label for qwen25
    vision = {a.name: a.adapter.vision_parameter_names(a.model) for a in cohort.agents}
    before = {a.name: {n: p.detach().clone() for n, p in a.model.named_parameters()} for a in cohort.agents}
    for _ in range(2):
        metrics = cohort.step()
        for agent in cohort.agents:
            m = metrics[agent.name]
            assert m["label/coverage"] == 1.0 and m["trained_rows"] == 8.0, (agent.name, m)
    for agent in cohort.agents:
        after = dict(agent.model.named_parameters())
        assert any(not torch.equal(after[n].detach(), before[agent.name][n]) for n in vision[agent.name])
