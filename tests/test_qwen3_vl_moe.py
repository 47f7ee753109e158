"""Qwen3-VL MoE: presets, detection, and the vLLM weight-layout hook on both sync paths.

transformers holds the fused experts as ``[E, out, in]`` and saves them so; the hub (what vLLM's loader reads)
holds ``[E, in, out]``. The tiny MoE's expert width (96) differs from its hidden size (256) and ``2 × 96 ≠ 256``,
so either tensor in the wrong layout has the wrong shape.
"""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file

from corl_vl.rollout.vllm_engine import checkpoint_format_weights, save_weights_on_this_rank
from model_adapters import create_adapter, detect_adapter
from model_adapters.presets import all_presets
from model_adapters.qwen3_vl_moe.tiny import MOE_EXPERTS, MOE_FFN

HIDDEN = 256
DOWN = "model.language_model.layers.0.mlp.experts.down_proj"
GATE_UP = "model.language_model.layers.0.mlp.experts.gate_up_proj"


@pytest.fixture(scope="module")
def moe():
    adapter = create_adapter("tiny-qwen3-vl-moe")
    return adapter, adapter.load_model()


def test_presets_name_the_released_moe_sizes_and_folders_are_detected(tiny_checkpoint):
    for size in ("30B-A3B", "235B-A22B"):
        preset = all_presets()[f"qwen3-vl-{size.lower()}"]
        assert (preset.adapter, preset.hub_id) == ("qwen3_vl_moe", f"Qwen/Qwen3-VL-{size}-Instruct")
    assert detect_adapter(tiny_checkpoint("tiny-qwen3-vl-moe")) == "qwen3_vl_moe"


def test_hook_gives_the_hub_layout_of_the_fused_experts(moe):
    adapter, model = moe
    state = model.state_dict()
    # transformers' layout: [E, 2·I, H] and [E, H, I]
    assert state[GATE_UP].shape == (MOE_EXPERTS, 2 * MOE_FFN, HIDDEN)
    assert state[DOWN].shape == (MOE_EXPERTS, HIDDEN, MOE_FFN)
    sent = dict(checkpoint_format_weights(model, adapter))
    assert sent[GATE_UP].shape == (MOE_EXPERTS, HIDDEN, 2 * MOE_FFN)
    assert sent[DOWN].shape == (MOE_EXPERTS, MOE_FFN, HIDDEN)
    # expert 1, gate row 5 (output 5), input 7 sits at [1, 7, 5] in the hub layout
    assert sent[GATE_UP][1, 7, 5] == state[GATE_UP][1, 5, 7]
    assert sent[DOWN][3, 2, 9] == state[DOWN][3, 9, 2]
    for name in ("model.language_model.layers.0.mlp.gate.weight", "lm_head.weight"):
        assert torch.equal(sent[name], state[name])  # every other tensor is sent as it is


def test_default_hook_is_identity():
    adapter = create_adapter("tiny-qwen3-vl")
    tensor = torch.zeros(2, 3, 4)
    assert list(adapter.vllm_weights("model.language_model.layers.0.mlp.experts.down_proj", tensor)) == [
        ("model.language_model.layers.0.mlp.experts.down_proj", tensor)
    ]


def test_sync_folder_holds_what_the_in_memory_sync_sends(moe, tmp_path):
    adapter, model = moe
    save_weights_on_this_rank(model, adapter, tmp_path)
    saved = {}
    for shard in sorted(tmp_path.glob("*.safetensors")):
        saved.update(load_file(shard))
    sent = dict(checkpoint_format_weights(model, adapter))
    assert sorted(saved) == sorted(sent)
    assert saved[DOWN].shape == (MOE_EXPERTS, MOE_FFN, HIDDEN)
    assert saved[GATE_UP].shape == (MOE_EXPERTS, HIDDEN, 2 * MOE_FFN)
    for name, tensor in sent.items():
        assert torch.equal(saved[name], tensor), name


def test_zoo_folder_is_in_the_hub_layout(tiny_checkpoint):
    saved = {}
    for shard in sorted(tiny_checkpoint("tiny-qwen3-vl-moe").glob("*.safetensors")):
        saved.update(load_file(shard))
    assert saved[DOWN].shape == (MOE_EXPERTS, MOE_FFN, HIDDEN)
    assert saved[GATE_UP].shape == (MOE_EXPERTS, HIDDEN, 2 * MOE_FFN)


def _fresh_vllm_groups() -> None:
    """vLLM keeps one set of parallel groups per process and builds the expert group only when the process's first
    engine is a MoE: an earlier dense engine's groups (other tests in this worker) are dropped first."""
    from vllm.distributed import parallel_state

    if parallel_state.model_parallel_is_initialized() and parallel_state._EP is None:
        parallel_state.destroy_model_parallel()


@pytest.mark.vllm
def test_vllm_logprobs_match_and_a_weight_sync_lands():
    from test_vllm_new_families import check_logprobs_and_sync

    _fresh_vllm_groups()
    check_logprobs_and_sync("tiny-qwen3-vl-moe")


@pytest.mark.vllm
def test_a_sync_through_the_folder_lands_the_experts():
    from corl_vl.data.synth import generate_problems
    from corl_vl.rollout.vllm_engine import VLLMEngine

    _fresh_vllm_groups()
    adapter = create_adapter("tiny-qwen3-vl-moe")
    model = adapter.load_model()
    problems = generate_problems(2, seed=2)
    prompts = [adapter.encode_prompt(p) for p in problems]
    engine = VLLMEngine(adapter, max_model_len=1024)
    engine.in_process = (
        False  # the path a multiprocessing engine takes: save_pretrained folder, reload from disk
    )
    try:
        with torch.no_grad():
            for name, param in model.named_parameters():
                if ".mlp.experts." in name:
                    param.add_(torch.randn_like(param) * 0.05)
        engine.sync_weights(model)
        out = [
            c
            for r in engine.generate(problems, k=1, temperature=0.0, max_new_tokens=6, seed=0)
            for c in r.completions
        ]
        with torch.no_grad():
            lp = adapter.completion_logprobs(model, prompts, [c.ids for c in out])
        for i, c in enumerate(out):
            assert torch.allclose(lp.logprobs[i, : len(c.ids)], torch.tensor(c.logprobs), atol=1e-4), i
    finally:
        engine.close()


def test_a_training_checkpoint_of_a_moe_agent_is_in_the_hub_layout(tmp_path):
    """What ``eval --engine vllm`` and ``from_pretrained`` load from ``latest/<agent>``: the experts as the hub
    stores them, and transformers reads them back to the same weights."""
    from transformers import AutoModelForImageTextToText

    from corl_vl.config import config_from_dict
    from corl_vl.recipe import build_cohort
    from corl_vl.train.checkpoint import save_checkpoint

    cfg = config_from_dict(
        {
            "agents": [{"name": "moe", "model": "tiny-qwen3-vl-moe"}],
            "reward": {"name": "rent"},
            "data": {"limit": 2, "problems_per_step": 1},
            "train": {"output_dir": str(tmp_path / "run")},
        }
    )
    cohort = build_cohort(cfg, device="cpu")
    folder = save_checkpoint(tmp_path / "run", cohort) / "moe"
    saved: dict[str, torch.Tensor] = {}
    for shard in folder.glob("*.safetensors"):
        saved.update(load_file(shard))
    assert saved[DOWN].shape == (MOE_EXPERTS, MOE_FFN, HIDDEN)
    assert saved[GATE_UP].shape == (MOE_EXPERTS, HIDDEN, 2 * MOE_FFN)
    reloaded = dict(AutoModelForImageTextToText.from_pretrained(folder).named_parameters())
    trained = dict(cohort.agents[0].model.named_parameters())
    assert torch.equal(reloaded[DOWN], trained[DOWN]) and torch.equal(reloaded[GATE_UP], trained[GATE_UP])
