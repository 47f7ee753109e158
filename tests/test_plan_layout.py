"""The processes the plan prices (corl_vl/plan/layout.py) and each memory term of a turn, against numbers
computed by hand on the small model of tests/test_plan.py (1000 bf16 parameters: 2000 bytes of weights)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from test_plan import _cfg, _facts

from corl_vl.config import apply_overrides
from corl_vl.errors import CorlError
from corl_vl.plan import arithmetic as ar
from corl_vl.plan import plan_for_config
from corl_vl.plan.layout import process_layout

GIB = 2**30
CONTEXT = 2**29  # one CUDA context per process
ASLEEP = 2**30  # what a level-2 sleep leaves of an engine
ZERO3 = str(Path(__file__).resolve().parents[1] / "configs" / "deepspeed" / "zero3.json")
# one agent's gradient pass (tests/test_plan.py): fp32 gradients 4000 + activations 457600 + tail 5600
LIVE = 4000 + 457_600 + 5600


def test_layout_without_deepspeed_one_process_per_agent():
    alone = process_layout(2, 8, deepspeed=False)
    assert alone.processes == [(0, 0), (1, 1)] and alone.turns == []
    assert alone.leftover == [2, 3, 4, 5, 6, 7]
    shared = process_layout(3, 2, deepspeed=False)  # agent i on GPU i mod G
    assert shared.processes == [(0, 0), (1, 1), (2, 0)]
    assert shared.turns == [[0, 2]] and shared.turns_with(2) == [0] and shared.turns_with(1) == []
    assert process_layout(2, 1, deepspeed=False).turns == [[0, 1]]
    with pytest.raises(CorlError, match=r"agents\.0\.gpus: 2 GPUs for one agent need distributed.deepspeed"):
        process_layout(2, 4, [2, None], deepspeed=False)


def test_layout_with_deepspeed_blocks_of_gpus():
    even = process_layout(2, 8, deepspeed=True)
    assert even.gpus_of(0) == [0, 1, 2, 3] and even.gpus_of(1) == [4, 5, 6, 7]
    assert even.turns == [] and even.leftover == []
    uneven = process_layout(3, 8, deepspeed=True)  # the first agents one more
    assert [len(uneven.gpus_of(i)) for i in range(3)] == [3, 3, 2]
    assert process_layout(2, 8, [6, None], deepspeed=True).gpus_of(1) == [6, 7]
    assert process_layout(2, 8, [2, 3], deepspeed=True).leftover == [5, 6, 7]
    with pytest.raises(CorlError, match=r"distributed\.deepspeed: 2 agents need at least 2 GPUs"):
        process_layout(2, 1, deepspeed=True)


def test_an_idle_agent_s_engine_sleeps_during_the_other_s_turn():
    plan = plan_for_config(_cfg("vllm"), 1, 8 * GIB, facts_for=_facts)
    share = 3_865_470_566  # int(0.45 · 8 GiB)
    a = plan.agents[0]
    # the active agent: its masters (2000) and moments (8000) come back for the update only
    assert a.phases["rollout"] == CONTEXT + 2000 + share
    assert a.phases["sync"] == CONTEXT + 2000 + ASLEEP + 2000  # engine weights woken, no KV cache
    assert a.phases["update"] == CONTEXT + 2000 + 2000 + 8000 + ASLEEP + LIVE
    idle = CONTEXT + 2000 + ASLEEP  # context, bf16 weights, sleeping engine
    assert a.idle == idle
    # two processes on GPU 0, one share awake at a time
    assert plan.device_peak == {0: CONTEXT + 2000 + share + idle}


def test_kv_cache_may_queue_one_full_sequence_is_enough():
    weights, overhead = 2000, 3 * GIB // 2
    # room for 3 of 8 sequences of 1000 KV bytes: vLLM runs 3 at once and queues 5
    assert ar.vllm_concurrency(weights, 1000, weights + overhead + 3500, 8) == 3
    assert ar.vllm_concurrency(weights, 1000, weights + overhead + 999, 8) == 0  # not one: refused
    assert ar.vllm_concurrency(weights, 1000, 10 * GIB, 8) == 8
    plan = plan_for_config(_cfg("vllm"), 2, 8 * GIB, facts_for=_facts)
    one = 32 * (256 + 4 + 16)  # 32 KV bytes per token × (prompt + new tokens + margin)
    assert plan.agents[0].vllm_needed == 2000 + one + overhead
    assert (plan.agents[0].sequences, plan.agents[0].concurrent) == (2, 2) and plan.fits


def test_the_kl_reference_is_a_second_copy_unless_lora():
    cfg = apply_overrides(_cfg(), ["grpo.beta=0.04"])
    plain = plan_for_config(_cfg(), 2, 8 * GIB, facts_for=_facts)
    kl = plan_for_config(cfg, 2, 8 * GIB, facts_for=_facts)
    assert kl.agents[0].items["reference_model"] == 2000  # 1000 bf16 weights
    assert kl.device_peak[0] - plain.device_peak[0] == 2000
    lora = plan_for_config(apply_overrides(cfg, ["agents.a.lora={r: 2}"]), 2, 8 * GIB, facts_for=_facts)
    assert lora.agents[0].items["reference_model"] == 0  # the adapters-off model
    assert ar.reference_model(1000, 2, beta=0.0, lora=False) == 0


def test_zero3_partition_sync_gather_and_init_transient_by_hand():
    cfg = apply_overrides(_cfg("vllm"), [f"distributed.deepspeed={ZERO3}"])
    plan = plan_for_config(cfg, 8, 8 * GIB, facts_for=_facts)
    a = plan.agents[0]
    assert a.ranks == 4 and a.devices == ["cuda:0", "cuda:1", "cuda:2", "cuda:3"]
    # per rank: weights 2000/4, fp32 masters 4000/4, moments 8000/4, the bf16 gradient partition 2000/4
    static = CONTEXT + 500 + 1000 + 2000 + 500
    assert a.items["gradient_partition"] == 500
    share = 3_865_470_566
    assert a.phases["rollout"] == static + share  # the partition stays through the rollout
    # the sync: engine weights woken (2000) and, streamed, one trainer weight gathered at a time: the largest is
    # the embedding, 50 × 8 elements (MLP 16 × 8, query 8 × 8, vision MLP 8 × 4) in bf16: 800
    assert ar.largest_tensor(_facts(None)) == 400 and a.items["sync_gather"] == 800
    assert a.phases["sync"] == static + ASLEEP + 2000 + 800
    # ZeRO-3 keeps no live gradients beyond its partition: activations 457600 + tail 5600 > the step's 1000
    assert a.phases["update"] == static + ASLEEP + 457_600 + 5600
    # deepspeed.initialize: the Torch optimizer's int16 low halves (2000) + the zero step's fp32 gradients
    # (4000/4); before partitioning, the whole weights (2000) + low halves (2000) < that state + 3000
    assert a.items["init_transient"] == 3000 and a.phases["init"] == static + 3000
    # 16 ranks: at the optimizer 2000 + 250; before partitioning 2000 + 2000 - (125 + 250 + 500 + 125)
    items16 = ar.training_state(1000, 1000, 2, ar.Sharding(16, 3))
    assert ar.init_transient(items16, 2000, 1000, 2, ar.Sharding(16, 3)) == 3000
    # ZeRO-2 over 4 ranks: low halves 2000 + fp32 zero step 1000
    items2 = ar.training_state(1000, 1000, 2, ar.Sharding(4, 2))
    assert ar.init_transient(items2, 2000, 1000, 2, ar.Sharding(4, 2)) == 3000
    assert ar.init_transient(items2, 2000, 1000, 2, ar.Sharding()) == 0  # no DeepSpeed


def test_phases_of_a_handmade_item_list():
    items = {
        "cuda_context": 10,
        "weights": 100,
        "reference_model": 100,
        "master_weights": 50,
        "optimizer_state": 200,
        "gradient_partition": 25,
        "gradients": 0,
        "activations": 300,
        "vision_activations": 20,
        "logprob_tail": 5,
        "optimizer_step": 50,
        "init_transient": 70,
        "sync_gather": 100,
        "vllm_share": 1000,
        "vllm_weights": 100,
        "vllm_asleep": 8,
    }
    # static 10 + 100 + 100 + 50 + 200 + 25 = 485
    assert ar.phase_peaks(items) == {
        "rollout": 485 + 1000,
        "sync": 485 + 8 + 100 + 100,
        "update": 485 + 8 + 325,
        "init": 485 + 70,
    }
    # on a shared GPU the masters and moments (250) are in host memory outside the update
    turns = ar.phase_peaks(items, takes_turns=True)
    assert (turns["rollout"], turns["sync"], turns["update"]) == (235 + 1000, 235 + 208, 818)
    assert ar.idle_bytes(items) == 10 + 100 + 100 + 8


def test_the_zero3_sync_gathers_the_whole_model_where_it_cannot_stream():
    zero3 = [f"distributed.deepspeed={ZERO3}"]
    hf = plan_for_config(apply_overrides(_cfg("hf"), zero3), 8, 8 * GIB, facts_for=_facts)
    assert hf.agents[0].items["sync_gather"] == 2000  # an HF engine: Agent.sync gathers everything at once
    lora = apply_overrides(_cfg("vllm"), [*zero3, "agents.a.lora={r: 2}"])
    assert plan_for_config(lora, 8, 8 * GIB, facts_for=_facts).agents[0].items["sync_gather"] == 2000
    f = dataclasses.replace(
        _facts(None), zero3_sync_whole=True
    )  # a family converter (Qwen3-VL-MoE's experts)
    assert ar.sync_gather(f, 2, ar.Sharding(4, 3), streamed=True) == 2000
    assert ar.sync_gather(f, 2, ar.Sharding(4, 2), streamed=True) == 0  # ZeRO-2: the weights are whole
