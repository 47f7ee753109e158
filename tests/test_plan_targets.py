"""`corl-vl plan` for the paper's pairs at full size (published sizes, no download): bf16 from `dtype: auto`,
the process layout `corl-vl train` launches, the KL reference's bytes, and the 12B/8B config: it fits on 8 × 80 GB."""

from __future__ import annotations

import json

from corl_vl.cli import main
from corl_vl.config import load_config, pair_config
from corl_vl.plan import plan_for_config

GIB = 2**30
PAIR = "qwen2.5-vl-3b,internvl3.5-2b"


def _json(capsys, *args: str) -> dict:
    main(["plan", "--pair", PAIR, "--gpu-memory", "80GB", "--json", *args])
    return json.loads(capsys.readouterr().out)


def test_one_gpu_the_agents_take_turns_in_bf16(capsys):
    data = _json(capsys, "--gpus", "1")
    assert data["dtype"] == "bfloat16" and [a["dtype"] for a in data["agents"]] == ["bfloat16"] * 2
    layout = data["layout"]
    assert layout["processes"] == [
        {"agent": "qwen2.5-vl-3b", "gpu": 0},
        {"agent": "internvl3.5-2b", "gpu": 0},
    ]
    assert layout["takes_turns"] == [["qwen2.5-vl-3b", "internvl3.5-2b"]] and not layout["deepspeed"]
    # bf16 weights: 3 754 622 976 parameters × 2 bytes
    assert data["agents"][0]["items_gib"]["weights"] == round(7_509_245_952 / GIB, 3)
    assert data["fits"]


def test_two_and_eight_gpus_one_process_per_agent(capsys):
    two = _json(capsys, "--gpus", "2")["layout"]
    assert [p["gpu"] for p in two["processes"]] == [0, 1] and two["takes_turns"] == []
    eight = _json(capsys, "--gpus", "8")["layout"]
    assert [p["gpu"] for p in eight["processes"]] == [0, 1]
    assert eight["leftover_gpus"] == [2, 3, 4, 5, 6, 7]


def test_eight_gpus_with_deepspeed_four_ranks_per_agent(capsys):
    data = _json(capsys, "--gpus", "8", "--set", "distributed.deepspeed=configs/deepspeed/zero2.json")
    layout = data["layout"]
    assert layout["deepspeed"] and data["settings"]["zero_stage"] == 2
    assert [p["gpu"] for p in layout["processes"] if p["agent"] == "qwen2.5-vl-3b"] == [0, 1, 2, 3]
    assert [p["gpu"] for p in layout["processes"] if p["agent"] == "internvl3.5-2b"] == [4, 5, 6, 7]
    assert data["fits"]


def test_beta_raises_each_gpu_by_the_reference_model():
    base = plan_for_config(pair_config(PAIR.split(",")), 2, 80 * GIB)
    kl = plan_for_config(pair_config(PAIR.split(","), ["grpo.beta=0.04"]), 2, 80 * GIB)
    # a second bf16 copy: 3 754 622 976 × 2 and 2 348 273 664 × 2 bytes
    assert {d: kl.device_peak[d] - base.device_peak[d] for d in (0, 1)} == {
        0: 7_509_245_952,
        1: 4_696_547_328,
    }


def test_the_12b_8b_config_fits_on_8_x_80_gb():
    plan = plan_for_config(load_config("configs/pairs/gemma-3-12b_internvl3.5-8b.yaml"), 8, 80 * GIB)
    assert plan.fits, plan.device_peak  # the target of issue #39
    for agent in plan.agents:
        assert agent.ranks == 4 and agent.vllm_needed <= agent.items["vllm_share"]
        assert agent.sequences == 8 and agent.concurrent == 8  # 8 prompts × 4 completions over 4 engines
    gemma = plan.agents[0]
    # the streamed ZeRO-3 sync gathers one weight at a time: the largest is the embedding, 262 208 × 3840 bf16
    # (the whole model, 12 187 325 040 × 2 bytes, before): the sync is no longer the fullest phase
    assert gemma.items["sync_gather"] == 262_208 * 3840 * 2
    assert gemma.items["vllm_weights"] == 12_187_325_040 * 2
    assert gemma.phases["sync"] < gemma.phases["rollout"] < 80 * GIB
