"""What trains is decided from the config before any model loads (issue #45): every part frozen, LoRA's adapters
all inside a frozen part, LoRA targets that name no module are one line before a weight is read or the run folder
is written; a cohort-wide ``train.freeze: [vision_tower]`` freezes the vision-language agents' towers and leaves a
text-only agent alone (one info line)."""

from __future__ import annotations

import logging

import pytest
from test_cohort import TINY, TINY_COHORT

from corl_vl.config import config_from_dict, load_config
from corl_vl.errors import CorlError
from corl_vl.recipe import build_cohort, train
from model_adapters.base import ModelAdapter


@pytest.fixture
def no_weights(monkeypatch):
    """Fail the test if any model's weights load (a spy on the adapters' one loading entry)."""

    def refuse(self, **_):
        raise AssertionError(f"{self.name}: weights loaded before the config was refused")

    monkeypatch.setattr(ModelAdapter, "load_model", refuse)


@pytest.mark.parametrize(
    "overrides,message",
    [
        (["train.freeze=[vision_tower, projector, language_model, lm_head]"], "leaves nothing of agent qwen"),
        (
            ["agents.qwen.lora={r: 4}", "train.freeze=[language_model]"],
            r"agents\.0\.lora: every module LoRA adapts lies in train\.freeze's language_model",
        ),
        (
            ["agents.qwen.lora={r: 4, target_modules: [no_such_proj]}"],
            r"agents\.0\.lora\.target_modules: \['no_such_proj'\] names no module .*leave it \[\]",
        ),
        (["train.freeze=[vision]"], r"train\.freeze: 'vision' is not a part of agent qwen"),
    ],
    ids=["everything-frozen", "lora-in-frozen-part", "lora-targets-nothing", "unknown-part"],
)
def test_refused_in_one_line_before_weights_load_or_the_run_folder_is_written(
    tmp_path, no_weights, overrides, message
):
    run = tmp_path / "run"
    cfg = load_config(TINY_COHORT, [*TINY, f"train.output_dir={run}", *overrides])
    with pytest.raises(CorlError, match=message) as err:
        train(cfg, progress=False)
    assert "\n" not in str(err.value)
    assert not run.exists()  # no config.yaml, nothing


def _mixed(freeze):
    return config_from_dict(
        {
            "agents": [
                {"name": "vlm", "model": "tiny-qwen2.5-vl"},
                {"name": "text", "model": "tiny-qwen2.5"},
            ],
            "data": {"train": "synthetic", "limit": 4, "problems_per_step": 2},
            "grpo": {"k": 2, "max_new_tokens": 4},
            "train": {"freeze": freeze, "plot": False},
        }
    )


def test_a_cohort_wide_vision_freeze_leaves_a_text_agent_alone(caplog):
    from corl_vl.train.parts_check import check_trainable

    cfg = _mixed(["vision_tower"])
    with caplog.at_level(logging.INFO, logger="corl_vl.train.parts_check"):
        check_trainable(cfg.agents, cfg.train.freeze)
    (line,) = [r.getMessage() for r in caplog.records if r.name == "corl_vl.train.parts_check"]
    assert (
        line == "train.freeze: vision_tower applies to the vision-language agents; text-only text left alone"
    )
    vlm, text = build_cohort(cfg, device="cpu").agents
    tower = set(vlm.adapter.vision_parameter_names(vlm.model))
    frozen = {n for n, p in vlm.model.named_parameters() if not p.requires_grad}
    assert frozen and frozen <= tower
    assert all(p.requires_grad for p in text.model.parameters())


def test_a_vision_freeze_with_only_text_agents_is_refused(no_weights):
    cfg = _mixed(["vision_tower"])
    cfg.agents[0].model = "tiny-qwen2.5"
    from corl_vl.train.parts_check import check_trainable

    with pytest.raises(CorlError, match=r"train\.freeze: vision_tower: no agent has one"):
        check_trainable(cfg.agents, cfg.train.freeze)
