"""LoRA (``agents[i].lora``, peft) and ``train.freeze`` on tiny real models: what trains, what the engines and the
KL reference see, and what the optimizer holds."""

from __future__ import annotations

import pytest
import torch
from adapter_families import FAMILIES, family_adapter
from test_cohort import TINY, TINY_COHORT, ForcedTexts, boxed

from corl_vl.config import load_config
from corl_vl.errors import CorlError
from corl_vl.rollout.weights import engine_state_dict
from corl_vl.train.cohort import Cohort

LORA = "agents.qwen.lora={r: 4, alpha: 8}"


def _cohort(*overrides: str) -> Cohort:
    cohort = Cohort.from_config(load_config(TINY_COHORT, [*TINY, *overrides]))
    qwen, internvl = cohort.agents
    qwen.engine = ForcedTexts(qwen.engine, boxed(3, 5, 5, 5))  # rewards vary within every group: both train
    internvl.engine = ForcedTexts(internvl.engine, boxed(3, 3, 3, 5))
    return cohort


def _snapshot(model) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def _stepped(agent) -> set[int]:
    """ids of the tensors the agent's optimizer steps (its masters when the model is low-precision)."""
    return {id(p) for group in agent.backend.optimizer.param_groups for p in group["params"]}


def test_lora_trains_only_the_adapters_and_the_merged_model_moves():
    cohort = _cohort(LORA)
    qwen = cohort.agents[0]
    trainable = {n for n, p in qwen.model.named_parameters() if p.requires_grad}
    assert trainable and all(".lora_A." in n or ".lora_B." in n for n in trainable)
    # the family default: the language model's projections only (Qwen's vision MLP has gate/up/down_proj too)
    assert all(".language_model.layers." in n for n in trainable)
    assert {n.split(".")[-4] for n in trainable} == {
        "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"
    }  # fmt: skip
    params = dict(qwen.model.named_parameters())
    assert _stepped(qwen) == {id(params[n]) for n in trainable}  # no optimizer state for the base
    before = _snapshot(qwen.model)
    merged_before = engine_state_dict(qwen.model)

    cohort.step()

    after = _snapshot(qwen.model)
    for name, tensor in before.items():
        if name not in trainable:
            assert torch.equal(after[name], tensor), name  # the base is bit-identical
    assert any(not torch.equal(after[n], before[n]) for n in trainable if ".lora_B." in n)
    merged = engine_state_dict(qwen.model)
    plain = qwen.adapter.load_model()  # the architecture without adapters: the names an engine knows
    assert set(merged) == set(plain.state_dict())
    moved = [k for k in merged if not torch.equal(merged[k], merged_before[k])]
    assert moved and all("language_model.layers." in k and k.endswith("proj.weight") for k in moved)
    assert cohort.agents[1].model is not None and not hasattr(cohort.agents[1].model, "peft_config")


def test_merged_weights_compute_what_the_trainer_computes():
    cohort = _cohort(LORA)
    qwen = cohort.agents[0]
    with torch.no_grad():  # non-zero adapters (B starts at 0, so the merge would be trivially the base)
        for name, p in qwen.model.named_parameters():
            if ".lora_B." in name:
                p.normal_(std=0.05)
    plain = qwen.adapter.load_model()
    plain.load_state_dict(engine_state_dict(qwen.model))
    prompts = qwen.encode(list(qwen.view)[:2])
    completions = [[11, 12, 13], [14, 15]]
    with torch.no_grad():
        trainer = qwen.adapter.completion_logprobs(qwen.model, prompts, completions).logprobs
        merged = qwen.adapter.completion_logprobs(plain, prompts, completions).logprobs
        base = qwen.adapter.completion_logprobs(qwen.adapter.load_model(), prompts, completions).logprobs
    assert torch.allclose(trainer, merged, atol=1e-5)
    assert (trainer - base).abs().max() > 1e-3


def test_kl_reference_under_lora_is_the_base_with_adapters_off():
    cohort = _cohort(LORA, "grpo.beta=0.1")
    qwen = cohort.agents[0]
    with torch.no_grad():
        for name, p in qwen.model.named_parameters():
            if ".lora_B." in name:
                p.normal_(std=0.05)
    flags = {n: p.requires_grad for n, p in qwen.model.named_parameters()}
    prompts = qwen.encode(list(qwen.view)[:2])
    completions = [[11, 12, 13], [14, 15]]
    reference = qwen.score(prompts, completions, model=qwen.ref_model).logprobs
    trainer = qwen.score(prompts, completions).logprobs
    base = qwen.score(prompts, completions, model=qwen.adapter.load_model()).logprobs
    assert torch.allclose(reference, base, atol=1e-6)
    assert (trainer - reference).abs().max() > 1e-3
    assert {n: p.requires_grad for n, p in qwen.model.named_parameters()} == flags  # switched back exactly
    assert sum(p.numel() for p in qwen.model.parameters()) == sum(
        p.numel() for p in qwen.ref_model.parameters()
    )  # the same tensors, no second copy
    metrics = cohort.step()
    assert metrics["qwen"]["trained_rows"] > 0 and "kl" in metrics["qwen"]


def test_freeze_keeps_the_vision_side_bit_identical_and_out_of_the_optimizer():
    cohort = _cohort("train.freeze=[vision_tower, projector]")
    for agent in cohort.agents:
        parts = agent.adapter.model_parts(agent.model)
        vision = set(agent.adapter.vision_parameter_names(agent.model))
        frozen = {
            n
            for n, _ in agent.model.named_parameters()
            if agent.adapter.parts_of(parts, n) & {"vision_tower", "projector"}
        }
        assert frozen == vision  # the two parts are the whole vision side
        params = dict(agent.model.named_parameters())
        assert not _stepped(agent) & {id(params[n]) for n in frozen}
    before = {a.name: _snapshot(a.model) for a in cohort.agents}
    cohort.step()
    for agent in cohort.agents:
        after = _snapshot(agent.model)
        for name, tensor in before[agent.name].items():
            if name in set(agent.adapter.vision_parameter_names(agent.model)):
                assert torch.equal(after[name], tensor), name
                assert dict(agent.model.named_parameters())[name].grad is None
        assert any(
            not torch.equal(after[n], t) for n, t in before[agent.name].items() if "language_model" in n
        ), agent.name


def test_qwen_projector_is_its_own_part():
    cohort = _cohort("train.freeze=[projector]")
    qwen = cohort.agents[0]
    frozen = {n for n, p in qwen.model.named_parameters() if not p.requires_grad}
    assert frozen and all(n.startswith("model.visual.merger.") for n in frozen)


def test_unknown_part_is_one_line_listing_the_family_parts():
    with pytest.raises(CorlError, match=r"train.freeze: 'vision' is not a part .*vision_tower, projector"):
        Cohort.from_config(load_config(TINY_COHORT, [*TINY, "train.freeze=[vision]"]))


def test_freezing_everything_is_refused():
    everything = "train.freeze=[vision_tower, projector, language_model, lm_head]"
    with pytest.raises(CorlError, match="leaves nothing"):
        Cohort.from_config(load_config(TINY_COHORT, [*TINY, everything]))


def test_lora_targets_matching_nothing_are_one_line():
    with pytest.raises(CorlError, match=r"lora.target_modules: .*leave it \[\]"):
        Cohort.from_config(
            load_config(TINY_COHORT, [*TINY, "agents.qwen.lora={r: 4, target_modules: [no_such_proj]}"])
        )


@pytest.mark.parametrize("family", FAMILIES)
def test_every_family_declares_its_parts(family):
    adapter = family_adapter(family)
    model = adapter.load_model()
    parts = adapter.model_parts(model)
    names = [n for n, _ in model.named_parameters()]
    vision = {n for n in names if adapter.parts_of(parts, n) & {"vision_tower", "projector"}}
    assert vision == set(adapter.vision_parameter_names(model))
    assert not {n for n in names if adapter.parts_of(parts, n) >= {"vision_tower", "projector"}}  # disjoint
    assert all(adapter.parts_of(parts, n) for n in names)  # every parameter in some part
    if adapter.supports_images:
        assert {"vision_tower", "projector"} <= set(parts)


@pytest.mark.parametrize("trainable", [LORA, "train.freeze=[embeddings, vision_tower]"])
def test_frozen_inputs_still_train_under_gradient_checkpointing(trainable):
    """The GPU default turns checkpointing on; with the embeddings frozen no checkpointed layer's input
    requires grad, and the layers' trainable weights must still get gradients."""
    cohort = _cohort(trainable, "train.gradient_checkpointing=true")
    qwen = cohort.agents[0]
    assert qwen.model.is_gradient_checkpointing
    trainable_names = [n for n, p in qwen.model.named_parameters() if p.requires_grad]
    layers = [n for n in trainable_names if ".language_model.layers.0." in n]
    before = _snapshot(qwen.model)
    metrics = cohort.step()
    assert metrics["qwen"]["grad_norm"] > 0
    after = _snapshot(qwen.model)
    assert layers and any(not torch.equal(after[n], before[n]) for n in layers)


def test_disable_dropout_zeroes_the_model_but_keeps_the_lora_dropout_asked_for():
    # train.disable_dropout runs before peft injects the adapters: a LoRA dropout the user set stays in force
    cohort = Cohort.from_config(
        load_config(TINY_COHORT, [*TINY, "agents.qwen.lora={r: 4, alpha: 8, dropout: 0.25}"])
    )
    qwen = cohort.agents[0]
    rates = {n: m.p for n, m in qwen.model.named_modules() if isinstance(m, torch.nn.Dropout)}
    lora = {n: p for n, p in rates.items() if "lora_dropout" in n}
    assert lora and set(lora.values()) == {0.25}
    assert all(p == 0.0 for n, p in rates.items() if n not in lora)
