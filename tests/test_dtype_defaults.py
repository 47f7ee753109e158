"""The weights' dtype default (model_adapters/dtypes.py): ``auto`` for every preset and ``--pair``, bf16 once the
device is CUDA, fp32 on the CPU; and TF32 for the fp32 matmuls left on a CUDA device
(corl_vl/train/training_defaults.py), while the CPU path leaves torch's global settings alone."""

from __future__ import annotations

import os

import pytest
import torch

from corl_vl.config import TrainConfig, pair_config, to_dict
from corl_vl.errors import CorlError
from corl_vl.rollout.vllm_engine import engine_kwargs
from corl_vl.train.resume_check import differences
from corl_vl.train.training_defaults import (
    VLLM_PRECISION_ENV,
    apply_tf32,
    apply_training_defaults,
    tf32_settings,
)
from model_adapters.dtypes import AUTO_DTYPE, resolve_dtype
from model_adapters.presets import all_presets
from model_adapters.registry import create_adapter

_ENGINE = dict(
    seed=0,
    kv_cache_memory_bytes=1 << 28,
    gpu_memory_utilization=0.5,
    sleep_between_phases=False,
    max_model_len=None,
    world_size=1,
)


def test_every_preset_is_bf16_on_cuda_and_fp32_on_cpu():
    for name in all_presets():
        adapter = create_adapter(name)  # configuration only: no weights, no hub access
        assert adapter.dtype == AUTO_DTYPE, name
        assert adapter.resolved_dtype("cuda") == adapter.resolved_dtype("cuda:3") == "bfloat16", name
        assert adapter.resolved_dtype("cpu") == "float32", name
        assert adapter.torch_dtype == torch.float32, name  # nothing loaded yet: the CPU's answer


@pytest.mark.parametrize("preset", ["tiny-qwen2.5-vl", "tiny-qwen2.5"])
def test_the_vllm_engine_gets_the_resolved_dtype(preset):
    adapter = create_adapter(preset)
    assert engine_kwargs(adapter, on_gpu=True, **_ENGINE)["dtype"] == "bfloat16"
    assert engine_kwargs(adapter, on_gpu=False, **_ENGINE)["dtype"] == "float32"
    explicit = create_adapter(preset, dtype="float32")  # what the user sets is kept on every device
    assert engine_kwargs(explicit, on_gpu=True, **_ENGINE)["dtype"] == "float32"


def test_pair_is_auto_unless_the_user_sets_a_dtype():
    cfg = pair_config(["tiny-qwen2.5", "tiny-llama3"])
    for agent in cfg.agents:
        adapter = create_adapter(agent.model, adapter=agent.adapter, **agent.adapter_options())
        assert adapter.resolved_dtype("cuda:0") == "bfloat16" and adapter.resolved_dtype("cpu") == "float32"
    # the run record names no dtype, so a resume on the same (or another) device reports no change
    record = to_dict(cfg)
    assert all("dtype" not in a["adapter_kwargs"] for a in record["agents"])
    assert differences(record, to_dict(pair_config(["tiny-qwen2.5", "tiny-llama3"]))) == {}
    chosen = pair_config(["tiny-qwen2.5", "tiny-llama3"], ["agents.0.adapter_kwargs.dtype=float32"])
    adapter = create_adapter(chosen.agents[0].model, **chosen.agents[0].adapter_options())
    assert adapter.resolved_dtype("cuda") == "float32"


def test_cpu_load_stays_fp32_and_dtype_names_are_checked():
    adapter = create_adapter("tiny-qwen2.5")
    model = adapter.load_model(device="cpu")
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    assert adapter.torch_dtype == torch.float32 and adapter.loaded_device == "cpu"
    assert resolve_dtype("float16", "cuda") == "float16" and resolve_dtype("bfloat16", "cpu") == "bfloat16"
    with pytest.raises(CorlError, match=r"unknown dtype 'float8'.*auto"):
        create_adapter("tiny-qwen2.5", dtype="float8")


def test_tf32_is_decided_by_the_device():
    assert tf32_settings("cpu") == {} and tf32_settings("mps") == {}
    for device in ("cuda", "cuda:1"):
        settings = tf32_settings(device)
        assert settings["float32_matmul_precision"] == "high"
        assert settings["cudnn_conv_fp32_precision"] == "tf32"
        assert settings[VLLM_PRECISION_ENV] == "high"


def _globals() -> tuple:
    return (
        torch.get_float32_matmul_precision(),
        torch.backends.cuda.matmul.fp32_precision,
        torch.backends.cudnn.conv.fp32_precision,
        torch.backends.mkldnn.matmul.fp32_precision,
        os.environ.get(VLLM_PRECISION_ENV),
    )


def test_the_cpu_path_leaves_torch_settings_untouched(monkeypatch):
    monkeypatch.delenv(VLLM_PRECISION_ENV, raising=False)
    before = _globals()
    model = create_adapter("tiny-qwen2.5").load_model()
    for device in ("cpu", "cuda:0"):  # a CUDA device named in a process without CUDA changes nothing either
        apply_training_defaults(model, TrainConfig(gradient_checkpointing=False), device)
        assert _globals() == before, device


def test_apply_tf32_sets_what_it_decided(monkeypatch):
    monkeypatch.delenv(VLLM_PRECISION_ENV, raising=False)
    saved = torch.get_float32_matmul_precision()
    try:
        apply_tf32(tf32_settings("cuda"))
        assert torch.get_float32_matmul_precision() == "high"
        assert torch.backends.cuda.matmul.fp32_precision == "tf32"
        assert torch.backends.cudnn.conv.fp32_precision == "tf32"
        assert os.environ[VLLM_PRECISION_ENV] == "high"
        monkeypatch.setenv(VLLM_PRECISION_ENV, "highest")  # a user's own choice for vLLM wins
        apply_tf32(tf32_settings("cuda"))
        assert os.environ[VLLM_PRECISION_ENV] == "highest"
    finally:
        torch.set_float32_matmul_precision(saved)
