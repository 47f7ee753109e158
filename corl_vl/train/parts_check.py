"""What trains, decided from the config before any model loads: ``train.freeze`` and ``agents[i].lora``.

Why before: a config that leaves an agent nothing to train (every part frozen, LoRA's adapters all inside a
frozen part, LoRA targets that name no module) is wrong whatever the weights are, so it is refused before the
run folder is written and before minutes of loading. Part and module names come from the architecture built on
the meta device (the model's ``config.json``, no weights), through the same adapter hooks the trainer uses.

A cohort-wide ``train.freeze`` may name parts only vision-language models have (``vision_tower``,
``projector``): a text-only agent in a mixed cohort has none, so those names leave it alone (one info line).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from corl_vl.errors import CorlError

_log = logging.getLogger(__name__)

VISION_PARTS = ("vision_tower", "projector")  # parts of a vision-language model only


def applicable_freeze(adapter: Any, names: Sequence[str]) -> list[str]:
    """``train.freeze`` as it applies to one agent: a text-only model keeps its (absent) vision parts out."""
    if getattr(adapter, "supports_images", True):
        return list(names)
    return [n for n in names if n not in VISION_PARTS]


def meta_model(adapter: Any) -> Any:
    """The adapter's architecture on the meta device: module and parameter names, no weights, no memory."""
    # lazy: torch, transformers
    import torch
    import transformers
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(adapter.model_path, trust_remote_code=adapter.trust_remote_code)
    auto = getattr(transformers, adapter.auto_model_class)
    with torch.device("meta"):
        return auto.from_config(config, trust_remote_code=adapter.trust_remote_code)


def lora_modules(model: Any, adapter: Any, lora: Any) -> tuple[Any, list[str]]:
    """(peft's ``target_modules``, the module names of ``model`` they match), matched by peft's own rule."""
    # lazy: peft
    import peft
    from peft.tuners.tuners_utils import check_target_module_exists

    targets = list(lora.target_modules) or adapter.lora_target_modules(model)
    config = peft.LoraConfig(r=lora.r, lora_alpha=lora.alpha, target_modules=targets)
    return targets, [name for name, _ in model.named_modules() if check_target_module_exists(config, name)]


def check_trainable(
    agents: Sequence[Any], freeze: Sequence[str], *, adapters: Sequence[Any] | None = None
) -> None:
    """Refuse, in one line, an agent of ``agents`` (the config's) that would train nothing under ``freeze``
    (``train.freeze``) or LoRA targets that match nothing (see the module doc); ``adapters``: the agents'
    adapters when the caller has them (else they are created)."""
    # lazy: PIL, numpy, tokenizers
    from model_adapters.registry import create_adapter

    names = list(freeze)
    if not names and all(agent.lora is None for agent in agents):
        return
    text_only = []
    for i, agent in enumerate(agents):
        adapter = (
            adapters[i]
            if adapters is not None
            else create_adapter(agent.model, adapter=agent.adapter, **agent.adapter_options())
        )
        freeze = applicable_freeze(adapter, names)
        if len(freeze) < len(names):
            text_only.append(agent.name)
        if freeze or agent.lora is not None:
            _check_agent(i, agent, adapter, freeze, meta_model(adapter))
    if text_only and len(text_only) == len(agents):
        vision = ", ".join(n for n in names if n in VISION_PARTS)
        raise CorlError(f"train.freeze: {vision}: no agent has one (every model is text-only); drop it")
    if text_only:
        vision = ", ".join(n for n in names if n in VISION_PARTS)
        _log.info(
            "train.freeze: %s applies to the vision-language agents; text-only %s left alone",
            vision,
            ", ".join(text_only),
        )


def _check_agent(i: int, agent: Any, adapter: Any, freeze: list[str], model: Any) -> None:
    parts = adapter.model_parts(model)
    unknown = [n for n in freeze if n not in parts]
    if unknown:
        raise CorlError(
            f"train.freeze: '{unknown[0]}' is not a part of agent {agent.name}'s model ({adapter.name}); its "
            f"parts are {', '.join(parts)}"
        )
    frozen = tuple(prefix for name in freeze for prefix in parts[name])
    if agent.lora is None:
        if frozen and all(name.startswith(frozen) for name, _ in model.named_parameters()):
            raise CorlError(
                f"train.freeze: {', '.join(freeze)} leaves nothing of agent {agent.name}'s model to train"
            )
        return
    targets, matched = lora_modules(model, adapter, agent.lora)
    if not matched:
        raise CorlError(
            f"agents.{i}.lora.target_modules: {targets} names no module of agent {agent.name}'s model "
            f"({adapter.name}); leave it [] for the family's default"
        )
    if frozen and all(f"{name}.".startswith(frozen) for name in matched):
        raise CorlError(
            f"agents.{i}.lora: every module LoRA adapts lies in train.freeze's {', '.join(freeze)}, so agent "
            f"{agent.name} would train nothing; drop those parts from train.freeze or drop the LoRA"
        )
