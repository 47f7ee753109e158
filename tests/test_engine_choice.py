"""``rollout.engine: auto`` (the default): HF below ``rollout.vllm_min_params`` parameters or without vLLM, vLLM
from there on; explicit ``hf`` / ``vllm`` are taken as written. Tiny real-architecture models throughout."""

from __future__ import annotations

import importlib.util
import logging

import pytest

from corl_vl.config import config_from_dict
from corl_vl.errors import CorlError
from corl_vl.rollout import parameter_count, resolve_engine
from corl_vl.rollout.hf import HFEngine
from corl_vl.train.cohort import Cohort
from model_adapters.registry import create_adapter


@pytest.fixture(scope="module")
def tiny_model():
    return create_adapter("tiny-qwen2.5").load_model()


def _cfg(**rollout):
    raw = {
        "agents": [{"name": "a0", "model": "tiny-qwen2.5"}],
        "data": {"limit": 4, "problems_per_step": 2},
        "grpo": {"k": 2, "max_new_tokens": 4},
        "rollout": rollout,
        "train": {"reward": "ttrl", "max_steps": 1, "plot": False},
    }
    return config_from_dict(raw, source="test")


def test_auto_is_the_default_with_a_measured_threshold():
    cfg = _cfg()
    assert cfg.rollout.engine == "auto"
    assert cfg.rollout.vllm_min_params == 20_000_000


def test_parameter_count_counts_every_tensor(tiny_model):
    assert parameter_count(tiny_model) == sum(p.numel() for p in tiny_model.parameters()) > 1_000_000


def test_auto_picks_hf_below_the_threshold(tiny_model):
    kind, why = resolve_engine("auto", tiny_model, vllm_min_params=20_000_000)
    assert kind == "hf"
    assert "< rollout.vllm_min_params = 20 M" in why


def test_auto_picks_vllm_from_the_threshold_on_when_installed(tiny_model, monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object() if name == "vllm" else None)
    assert resolve_engine("auto", tiny_model, vllm_min_params=parameter_count(tiny_model))[0] == "vllm"
    assert resolve_engine("auto", tiny_model, vllm_min_params=parameter_count(tiny_model) + 1)[0] == "hf"


def test_auto_falls_back_to_hf_without_vllm(tiny_model, monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    kind, why = resolve_engine("auto", tiny_model, vllm_min_params=0)
    assert kind == "hf"
    assert "vLLM is not installed" in why


def test_explicit_engines_are_taken_as_written(tiny_model):
    assert resolve_engine("hf", tiny_model, vllm_min_params=0)[0] == "hf"
    assert resolve_engine("vllm", tiny_model, vllm_min_params=10**12)[0] == "vllm"


def test_a_cohort_with_the_default_builds_hf_for_a_tiny_model_and_says_why(caplog):
    with caplog.at_level(logging.INFO, logger="corl_vl.train.agent"):
        cohort = Cohort.from_config(_cfg())
    assert isinstance(cohort.agents[0].engine, HFEngine)
    assert "agent a0: rollout engine hf (auto:" in caplog.text


@pytest.mark.parametrize(
    ("rollout", "key"),
    [({"engine": "fast"}, "rollout.engine"), ({"vllm_min_params": -1}, "rollout.vllm_min_params")],
)
def test_bad_engine_settings_name_the_key(rollout, key):
    with pytest.raises(CorlError, match=key.replace(".", r"\.")):
        _cfg(**rollout)


@pytest.mark.vllm
def test_auto_builds_a_vllm_engine_from_the_threshold_on(caplog):
    from corl_vl.rollout.vllm_engine import VLLMEngine

    with caplog.at_level(logging.INFO, logger="corl_vl.train.agent"):
        cohort = Cohort.from_config(_cfg(vllm_min_params=0))
    engine = cohort.agents[0].engine
    try:
        assert isinstance(engine, VLLMEngine)
        assert "agent a0: rollout engine vllm (auto:" in caplog.text
    finally:
        engine.close()
