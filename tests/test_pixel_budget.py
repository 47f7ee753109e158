"""Pixel budgets per image: ``data.max_pixels`` / ``data.min_pixels`` and ``adapter_kwargs.image_options`` in
YAML reach the processor of every family that has one (the image token count changes)."""

from __future__ import annotations

import pytest
from PIL import Image

from corl_vl.config import load_config
from corl_vl.data.problem import Problem
from corl_vl.errors import CorlError
from model_adapters.registry import create_adapter

PROBLEM = Problem(id="p", question="How many?", images=[Image.new("RGB", (448, 448), (200, 30, 30))])
BUDGET = 28 * 28 * 16  # 16 merged image tokens for Qwen2.5-VL (448² is 64 under the tiny processor's cap)


def _image_tokens(agent_cfg) -> int:
    adapter = create_adapter(agent_cfg.model, adapter=agent_cfg.adapter, **agent_cfg.adapter_options())
    ids = adapter.encode_prompt(PROBLEM).prompt_ids
    return sum(t in adapter.placeholder_token_ids for t in ids)


def _config(tmp_path, text: str):
    path = tmp_path / "cohort.yaml"
    path.write_text(text)
    return load_config(path)


AGENTS = """agents:
  - name: qwen
    model: tiny-qwen2.5-vl
{extra}  - name: internvl
    model: tiny-internvl3.5
"""


def test_data_max_pixels_reaches_the_processor(tmp_path):
    plain = _config(tmp_path, AGENTS.format(extra=""))
    budget = _config(tmp_path, AGENTS.format(extra="") + f"data:\n  max_pixels: {BUDGET}\n")
    assert _image_tokens(plain.agents[0]) == 64
    assert _image_tokens(budget.agents[0]) == 16
    # InternVL has fixed 448² tiles and no pixel budget: the same tokens either way
    assert _image_tokens(plain.agents[1]) == _image_tokens(budget.agents[1])


def test_image_options_mapping_in_yaml(tmp_path):
    extra = f"    adapter_kwargs:\n      image_options: {{max_pixels: {BUDGET}}}\n"
    cfg = _config(tmp_path, AGENTS.format(extra=extra))
    assert _image_tokens(cfg.agents[0]) == 16
    adapter = create_adapter("tiny-qwen2.5-vl", **cfg.agents[0].adapter_options())
    assert adapter.image_options.max_long_side == 1024  # the family default for the keys not given
    # the agent's own value wins over data.max_pixels
    both = _config(tmp_path, AGENTS.format(extra=extra) + "data:\n  max_pixels: 3136000\n")
    assert _image_tokens(both.agents[0]) == 16


def test_data_min_pixels_raises_small_images(tmp_path):
    small = Problem(id="s", question="?", images=[Image.new("RGB", (56, 56))])
    cfg = _config(tmp_path, AGENTS.format(extra="") + f"data:\n  min_pixels: {BUDGET}\n")
    agent = cfg.agents[0]
    adapter = create_adapter(agent.model, **agent.adapter_options())
    ids = adapter.encode_prompt(small).prompt_ids
    assert sum(t in adapter.placeholder_token_ids for t in ids) == 16  # 56² alone would be 4


def test_unknown_image_option_is_one_line(tmp_path):
    extra = "    adapter_kwargs:\n      image_options: {max_pixel: 1000}\n"
    with pytest.raises(
        CorlError, match=r"^agents.0.adapter_kwargs.image_options: unknown key 'max_pixel'; known: "
    ):
        _config(tmp_path, AGENTS.format(extra=extra))
    with pytest.raises(CorlError, match="unknown key 'bogus'"):
        create_adapter("tiny-qwen2.5-vl", image_options={"bogus": 1})
    with pytest.raises(CorlError, match=r"data.min_pixels: 100 > data.max_pixels 10"):
        _config(tmp_path, AGENTS.format(extra="") + "data:\n  min_pixels: 100\n  max_pixels: 10\n")
