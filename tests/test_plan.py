"""The memory plan's arithmetic on one small hand-computed model, its placement and verdict, and `corl-vl plan`."""

from __future__ import annotations

import dataclasses
import json

import pytest

from corl_vl.cli import main
from corl_vl.config import config_from_dict
from corl_vl.errors import CorlError
from corl_vl.plan import arithmetic as ar
from corl_vl.plan import parse_memory, plan_for_config
from model_adapters.model_facts import ModelFacts

# hidden 8, 2 layers, 2 query heads of 4, 1 KV head, MLP 16, vocab 50; a 1-layer vision tower of width 4 whose
# image is 12 patches (3 tokens for the language model)
F = ModelFacts(
    parameters=1000,
    vision_parameters=100,
    hidden=8,
    layers=2,
    heads=2,
    kv_heads=1,
    head_dim=4,
    intermediate=16,
    vocab=50,
    vision_hidden=4,
    vision_layers=1,
    vision_intermediate=8,
    image_tokens=3,
    vision_tokens=12,
)
W = ar.Workload(micro_batch=2, seq_len=10, completion=4, images=1, checkpointing=False, weight_bytes=2)


def test_activations_by_hand():
    # per token and layer: 16·8 + 14·8 (q) + 8·4 (kv) + 8·16 (MLP) = 400 bytes
    assert ar.text_layer_bytes(F, 2) == 400
    # 20 tokens: edges 20·8·2·5 = 1600, layers 2·20·400 = 16000
    assert ar.activations(F, W) == 17_600
    # checkpointing: every layer's input 2·20·8·2 = 640, one layer rebuilt 20·400 = 8000, edges 1600
    assert ar.activations(F, ar.Workload(2, 10, 4, 1, True, 2)) == 10_240
    # fp32 doubles the per-layer bytes: 800
    assert ar.text_layer_bytes(F, 4) == 800


def test_vision_and_tail_by_hand():
    # 2 images × 12 patches; one block: 16·4 + 14·4 + 8·4 + 8·8 = 216 bytes per patch
    assert ar.vision_activations(F, W) == 24 * 216
    # the tail: 12 bytes × 50 vocab × 8 tokens (below the chunk cap) + the LM head's gradient 50·8·2
    assert ar.logprob_tail(F, W, head_trained=True) == 4800 + 800
    assert ar.logprob_tail(F, W, head_trained=False) == 4800


def test_training_state_by_hand():
    torch_backend = ar.training_state(1000, 1000, 2, ar.Sharding(), largest=400)
    assert torch_backend == {
        "gradient_partition": 0,
        "weights": 2000,
        "master_weights": 2000,  # bf16: the masters' low halves
        "gradients": 4000,  # accumulated in fp32
        "optimizer_state": 8000,
        "optimizer_step": 4000 + 24 * 400,  # the fp32 gradients and one slice's temporaries (24 B/element)
    }
    # 2 + 2 + 4 + 8 = 16 bytes per parameter; fp16 keeps whole fp32 masters, fp32 none
    assert ar.training_state(1000, 1000, 2, ar.Sharding(), split=False)["master_weights"] == 4000
    assert ar.training_state(1000, 1000, 4, ar.Sharding())["master_weights"] == 0
    zero3 = ar.training_state(1000, 1000, 2, ar.Sharding(ranks=4, zero_stage=3))
    assert zero3 == {
        "weights": 500,
        "master_weights": 1000,
        "gradient_partition": 500,  # bf16, allocated by deepspeed.initialize and kept: static, not live
        "gradients": 0,
        "optimizer_state": 2000,
        "optimizer_step": 1000,  # the fp32 gradient partition at the step
    }
    ds_offload = ar.training_state(1000, 1000, 2, ar.Sharding(zero_stage=2, offload_optimizer=True))
    assert (ds_offload["master_weights"], ds_offload["optimizer_state"], ds_offload["optimizer_step"]) == (
        0,
        0,
        2000,
    )
    # optimizer.offload=cpu in the Torch backend: masters, moments and fp32 gradients in CPU memory
    offload = ar.training_state(1000, 1000, 2, ar.Sharding(offload_optimizer=True))
    assert offload == {
        "gradient_partition": 0,
        "weights": 2000,
        "master_weights": 0,
        "gradients": 0,
        "optimizer_state": 0,
        "optimizer_step": 0,
    }


def test_update_peak_and_kv_by_hand():
    items = ar.agent_items(F, W, ar.Sharding())
    # static 2000 + 2000 + 8000; gradient pass 4000 + 17600 + 5184 + 5600 = 32384 > the step's 4000 + 24·400
    assert ar.update_peak(items) == 12_000 + 32_384
    assert ar.kv_cache(F, 10, 2) == 2 * 2 * 1 * 4 * 2 * 10
    # LoRA r=16 on 7 projections per layer: 16 · (16 + 24 + 16 + 48 + 24) · 2 layers
    assert ar.lora_parameters(F) == 4096


def _cfg(engine: str = "hf"):
    return config_from_dict(
        {
            "agents": [
                {"name": "a", "model": "tiny-qwen2.5", "adapter_kwargs": {"dtype": "bfloat16"}},
                {"name": "b", "model": "tiny-qwen3", "adapter_kwargs": {"dtype": "bfloat16"}},
            ],
            "grpo": {"k": 2, "max_new_tokens": 4, "micro_batch_size": 2},
            "data": {"problems_per_step": 1},
            "rollout": {"engine": engine, "batch_size": 1},
            "train": {"gradient_checkpointing": False},
        }
    )


def _facts(_agent):
    return dataclasses.replace(F, image_tokens=0, vision_tokens=0, vision_parameters=0, vision_layers=0)


def test_placement_and_verdict():
    cfg = _cfg()
    context = 2**29  # one CUDA context per process
    # one agent: seq 256 + 4 = 260 tokens, micro-batch 2 (520 tokens), bf16, Torch backend, checkpointing off
    # activations 520·8·2·5 + 2·520·400 = 41600 + 416000; tail 12·50·2·4 + 50·8·2; fp32 gradients 4000
    live = 4000 + 457_600 + 5600
    static = context + 2000 + 2000 + 8000  # context, weights, master low halves, AdamW moments
    update = static + live
    two = plan_for_config(cfg, 2, 10**9, facts_for=_facts)
    assert [a.device for a in two.agents] == [0, 1]
    assert two.device_peak == {0: update, 1: update}
    # HF generate: 2 completions × 260 tokens × 32 KV bytes per token beside the static state
    assert two.agents[0].phases["rollout"] == static + 2 * 260 * 32
    work = ar.Workload(2, 260, 4, 0, False, 2)
    assert two.agents[0].activation_settings == {
        "checkpointing_on": ar.activations(_facts(None), dataclasses.replace(work, checkpointing=True)),
        "checkpointing_off": 457_600,
    }
    # one GPU: the agents take turns; the idle one leaves its context and bf16 weights (no engine to sleep)
    shared = plan_for_config(cfg, 1, 2 * 2**30, facts_for=_facts)
    assert shared.device_peak == {0: update + context + 2000}
    assert shared.fits and [a.turns_with for a in shared.agents] == [["b"], ["a"]]
    tight = plan_for_config(cfg, 1, update + context + 2000 - 1, facts_for=_facts)
    assert not tight.fits and tight.shortfall == 1
    assert tight.first_fix == "grpo.micro_batch_size=1"  # halves the activations: the cheapest lever


def test_vllm_share_must_hold_weights_and_kv():
    plan = plan_for_config(_cfg("vllm"), 2, 10**6, facts_for=_facts, gpu_memory_utilization=0.001)
    assert plan.agents[0].vllm_needed > plan.agents[0].items["vllm_share"]
    assert not plan.fits


def test_parse_memory():
    assert parse_memory("80GB") == 80 * 2**30 == parse_memory("80GiB")
    with pytest.raises(CorlError, match="expected a size"):
        parse_memory("lots")


def test_cli_plan_json(capsys):
    code = main(
        ["plan", "--pair", "tiny-qwen2.5,tiny-qwen3", "--gpus", "1", "--gpu-memory", "24GB", "--json"]
    )
    data = json.loads(capsys.readouterr().out)
    assert code == 0 and data["fits"] is True
    assert [a["name"] for a in data["agents"]] == ["tiny-qwen2.5", "tiny-qwen3"]


def test_cli_plan_needs_gpus(capsys):
    assert main(["plan", "--pair", "tiny-qwen2.5,tiny-qwen3", "--gpus", "0", "--gpu-memory", "80GB"]) == 2
    assert "pass --gpus N --gpu-memory 80GB" in capsys.readouterr().err


def test_optimizer_offload_setting_is_planned_in_one_process():
    cfg = _cfg()
    cfg.optimizer.offload = "cpu"
    plan = plan_for_config(cfg, 1, 10**9, facts_for=_facts)
    items = plan.agents[0].items
    # the Torch backend (one GPU): only the bf16 weights stay on the device
    assert plan.settings.offload_optimizer and plan.settings.zero_stage == 0
    assert (items["weights"], items["master_weights"], items["gradients"], items["optimizer_state"]) == (
        2000,
        0,
        0,
        0,
    )


def test_cli_plan_states_that_vllm_shares_a_problems_prompt(capsys):
    argv = ["plan", "--pair", "tiny-qwen2.5,tiny-qwen3", "--gpus", "1", "--gpu-memory", "24GB"]
    assert main([*argv, "--set", "rollout.engine=vllm"]) == 0
    vllm_lines = [line for line in capsys.readouterr().out.splitlines() if "vLLM:" in line]
    assert len(vllm_lines) == 2
    assert all("prefix caching and the multi-modal processor cache on" in line for line in vllm_lines)
