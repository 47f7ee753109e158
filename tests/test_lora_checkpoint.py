"""Checkpoints of a LoRA agent: the adapters in the training state, ``latest/<agent>`` a plain model folder with
the merged weights, and an exact resume."""

from __future__ import annotations

import pytest
import torch
from test_checkpoint import Killed, _builder, _config, _records, _weights

from corl_vl.config import apply_overrides
from corl_vl.recipe import train
from corl_vl.train.checkpoint import latest_checkpoint

LORA = ["agents.qwen.lora={r: 4, alpha: 8}", "train.freeze=[vision_tower]"]


def _lora_config(out):
    return apply_overrides(_config(out), LORA)


def test_resume_with_lora_is_exact(tmp_path):
    full, resumed = tmp_path / "full", tmp_path / "resumed"
    train(_lora_config(full), progress=False, prepare=_builder())
    with pytest.raises(Killed):  # dies in the rollout of step index 3, after the step-2 checkpoint
        train(_lora_config(resumed), progress=False, prepare=_builder(kill_at_call=3))
    train(_lora_config(resumed), resume=True, progress=False, prepare=_builder())
    for agent in ("qwen", "internvl"):
        a, b = _records(full, agent), _records(resumed, agent)
        assert a == b and sum(r["trained_rows"] for r in a) > 0, agent
        wa, wb = _weights(full, agent), _weights(resumed, agent)
        assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)
    from safetensors.torch import load_file

    adapters = [load_file(str(latest_checkpoint(r) / "state" / "qwen" / "lora" / "adapter_model.safetensors"))
                for r in (full, resumed)]  # fmt: skip
    assert adapters[0].keys() == adapters[1].keys() and all(
        torch.equal(adapters[0][k], adapters[1][k]) for k in adapters[0]
    )
    assert any(t.abs().max() > 0 for k, t in adapters[0].items() if "lora_B" in k)  # the adapters trained


def test_latest_agent_folder_is_the_merged_model(tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForImageTextToText

    run = tmp_path / "run"
    cfg = _lora_config(run)
    cfg.train.max_steps = 2
    train(cfg, progress=False, prepare=_builder())
    latest = run / "checkpoints" / "latest"
    merged = AutoModelForImageTextToText.from_pretrained(latest / "qwen")  # an ordinary HF folder
    assert not any("lora" in n or "base_layer" in n for n, _ in merged.named_parameters())
    # the saved adapters (peft's own format) on the base give the same weights as the merged folder
    from model_adapters.registry import create_adapter

    base = create_adapter("tiny-qwen2.5-vl").load_model()
    rebuilt = PeftModel.from_pretrained(base, latest / "state" / "qwen" / "lora").merge_and_unload()
    want = rebuilt.state_dict()
    got = merged.state_dict()
    assert want.keys() == got.keys()
    assert all(torch.allclose(got[k], want[k], atol=1e-6) for k in want)
    assert any(
        not torch.equal(got[k], v)
        for k, v in create_adapter("tiny-qwen2.5-vl").load_model().state_dict().items()
    )  # the merged folder is not the base


def test_adapters_of_other_lora_settings_are_one_line(tmp_path):
    from corl_vl.config import LoraConfig
    from corl_vl.errors import CorlError
    from corl_vl.train.lora import apply_lora, load_adapters, save_adapters
    from model_adapters.registry import create_adapter

    adapter = create_adapter("tiny-qwen2.5")
    saved = adapter.load_model()
    apply_lora(saved, adapter, LoraConfig(r=4), agent="a")
    save_adapters(saved, tmp_path / "lora")
    same = adapter.load_model()
    apply_lora(same, adapter, LoraConfig(r=4), agent="a")
    load_adapters(same, tmp_path / "lora")
    assert all(torch.equal(a, b) for a, b in zip(saved.state_dict().values(), same.state_dict().values()))
    other = adapter.load_model()
    apply_lora(other, adapter, LoraConfig(r=2), agent="a")
    with pytest.raises(
        CorlError, match=r"adapter_model.safetensors: adapters do not fit .* same lora settings"
    ):
        load_adapters(other, tmp_path / "lora")
    with pytest.raises(CorlError, match="missing; this checkpoint has no LoRA adapters"):
        load_adapters(other, tmp_path / "nothing")
