"""The plan's LoRA and freeze levers count what corl_vl.train.lora / freeze build: hand-computed numbers on the
small model of tests/test_plan.py, and the trainable parameters of real tiny models."""

from __future__ import annotations

import pytest
from test_plan import F, W, _cfg, _facts

from corl_vl.config import LoraConfig, apply_overrides
from corl_vl.plan import arithmetic as ar
from corl_vl.plan import plan_for_config


def test_lora_items_by_hand():
    items = ar.agent_items(F, W, ar.Sharding(), lora=True, lora_rank=2)
    adapters = 2 * (16 + 24 + 16 + 48 + 24) * 2  # rank 2 on 7 projections of 2 layers = 512
    assert ar.lora_parameters(F, 2) == adapters
    # bf16 base (1000 · 2) + fp32 adapters; no masters; fp32 gradients and AdamW moments of the adapters only
    assert items["weights"] == 2000 + 4 * adapters
    assert items["master_weights"] == 0
    assert items["gradients"] == 4 * adapters
    assert items["optimizer_state"] == 8 * adapters
    assert items["vision_activations"] == 0
    assert items["logprob_tail"] == 4800  # the LM head does not train


def test_frozen_vision_items_by_hand():
    items = ar.agent_items(F, W, ar.Sharding(), freeze_vision=True)
    # the Torch backend: bf16 masters kept as their low halves (2 B), gradients accumulated in fp32 (4 B)
    assert items["master_weights"] == 900 * 2 and items["optimizer_state"] == 900 * 8
    assert items["gradients"] == 900 * 4 and items["vision_activations"] == 0


def test_the_config_s_lora_and_freeze_reach_the_plan():
    cfg = _cfg()
    gib = 2**30
    plain = plan_for_config(cfg, 1, 80 * gib, facts_for=_facts)
    lora = plan_for_config(apply_overrides(_cfg(), ["agents.a.lora={r: 2}"]), 1, 80 * gib, facts_for=_facts)
    a_plain, a_lora = plain.agents[0].items, lora.agents[0].items
    assert a_lora["optimizer_state"] == 8 * ar.lora_parameters(F, 2)  # the agent's own rank
    assert a_plain["optimizer_state"] == 8 * F.parameters
    assert lora.agents[1].items == plain.agents[1].items  # agent b has no LoRA
    frozen = plan_for_config(
        apply_overrides(cfg, ["train.freeze=[vision_tower]"]), 1, 80 * gib, facts_for=lambda a: F
    )
    assert frozen.settings.freeze_vision
    # the tower's and projector's 100 parameters train no more: 900 left, AdamW's two fp32 moments each
    assert all(a.items["optimizer_state"] == 8 * 900 for a in frozen.agents)
    assert all(a.items["vision_activations"] == 0 for a in frozen.agents)


@pytest.mark.parametrize("preset", ["tiny-qwen2.5-vl", "tiny-internvl3.5", "tiny-gemma3", "tiny-qwen2.5"])
def test_plan_counts_match_the_built_model(preset):
    from corl_vl.train.freeze import freeze_parts
    from corl_vl.train.lora import apply_lora
    from model_adapters.memory_facts import memory_facts
    from model_adapters.registry import create_adapter

    facts = memory_facts(preset)
    adapter = create_adapter(preset)
    model = adapter.load_model()
    apply_lora(model, adapter, LoraConfig(r=4), agent="a")
    assert sum(p.numel() for p in model.parameters() if p.requires_grad) == ar.lora_parameters(facts, 4)
    if adapter.supports_images:
        model = adapter.load_model()
        freeze_parts(model, adapter, ["vision_tower", "projector"], agent="a")
        trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
        assert trainable == facts.parameters - facts.vision_parameters
