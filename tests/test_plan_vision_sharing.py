"""The plan counts one vision pass per problem: a micro-batch's vision activations are those of the problems it
holds (not of its rows) for families that share one encoding among a problem's K rows
(model_adapters.vision_sharing); the hand-computed model of tests/test_plan.py."""

from __future__ import annotations

import dataclasses

import pytest
from test_plan import F, W, _cfg

from corl_vl.config import apply_overrides
from corl_vl.plan import arithmetic as ar
from corl_vl.plan import plan_for_config
from model_adapters.memory_facts import memory_facts

SHARED = dataclasses.replace(F, shared_vision_pass=True)


@pytest.mark.parametrize(
    ("micro_batch", "group", "problems"),
    [
        (8, 8, 1),
        (4, 8, 1),
        (1, 8, 1),
        (16, 8, 2),
        (3, 4, 2),
        (5, 8, 2),
        (12, 8, 2),
        (9, 8, 2),
        (15, 8, 3),
        (2, 1, 2),
    ],
)
def test_problems_per_micro_batch_by_hand(micro_batch, group, problems):
    # e.g. 3 rows of groups of 4: rows 3-5 hold problems 0 and 1; 15 of 8: rows 15-29 hold problems 1, 2, 3
    assert ar.problems_per_micro_batch(micro_batch, group) == problems


def test_vision_activations_count_problems_not_rows():
    shared = dataclasses.replace(W, micro_batch=8, group=4)  # 2 problems × 4 rows
    # per row: 8 images × 12 patches × 216 bytes (tests/test_plan.py); shared: 2 images
    assert ar.vision_activations(F, shared) == 8 * 12 * 216
    assert ar.vision_activations(SHARED, shared) == 2 * 12 * 216
    assert ar.vision_activations(SHARED, dataclasses.replace(shared, group=1)) == 8 * 12 * 216
    # the tail is per row either way: each row scores its own completion
    assert ar.logprob_tail(SHARED, shared, head_trained=False) == ar.logprob_tail(
        F, shared, head_trained=False
    )


def test_the_plan_uses_grpo_k():
    cfg = apply_overrides(_cfg(), ["grpo.k=4", "grpo.micro_batch_size=4"])
    items = plan_for_config(cfg, 1, 80 * 2**30, facts_for=lambda a: SHARED).agents[0].items
    per_row = plan_for_config(cfg, 1, 80 * 2**30, facts_for=lambda a: F).agents[0].items
    assert per_row["vision_activations"] == 4 * items["vision_activations"] > 0


@pytest.mark.parametrize("preset", ["tiny-qwen2.5-vl", "tiny-internvl3.5", "tiny-gemma3", "tiny-qwen3-vl"])
def test_families_that_share_say_so(preset):
    assert memory_facts(preset).shared_vision_pass
    assert not memory_facts("tiny-qwen2.5").shared_vision_pass  # text: nothing to share
