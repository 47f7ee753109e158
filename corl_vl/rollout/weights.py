"""The trainer's weights as a rollout engine or a model folder holds them: LoRA adapters merged in.

Why: an agent trained with LoRA (:mod:`corl_vl.train.lora`) keeps its base weights frozen and the adapters in
extra modules (``q_proj.base_layer``, ``q_proj.lora_A`` …). vLLM, a separate HF model and ``from_pretrained``
know only the plain architecture, so they get ``W + scale · B·A`` under the plain names: the same function the
trainer computes. The merge is computed out of place; merging into the trainer's own weights and back would
round the frozen base a little at every sync.
"""

from __future__ import annotations

import sys
from typing import Any


def engine_state_dict(model: Any) -> dict[str, Any]:
    """``model.state_dict()``, with every active LoRA adapter merged into the weight it adapts (plain names)."""
    state = model.state_dict()
    lora = lora_layers(model)
    if not lora:
        return state
    # lazy: torch
    import torch

    out: dict[str, Any] = {}
    for key, tensor in state.items():
        parts = key.split(".")
        owner = next((".".join(parts[:i]) for i in range(1, len(parts)) if ".".join(parts[:i]) in lora), None)
        if owner is None:
            out[key] = tensor
            continue
        rest = key[len(owner) + 1 :]
        if not rest.startswith("base_layer."):
            continue  # the adapter's own tensors (lora_A, lora_B …)
        rest = rest.removeprefix("base_layer.")
        if rest == "weight":
            tensor = _merged_weight(lora[owner], tensor, torch)
        out[f"{owner}.{rest}"] = tensor
    return out


def lora_layers(model: Any) -> dict[str, Any]:
    """``model``'s LoRA layers by module name (none unless peft was imported: no adapter exists without it)."""
    if "peft" not in sys.modules:
        return {}
    # lazy: peft
    from peft.tuners.lora import LoraLayer

    return {name: m for name, m in model.named_modules() if isinstance(m, LoraLayer)}


def _merged_weight(layer: Any, weight: Any, torch: Any) -> Any:
    if layer.disable_adapters or layer.merged:  # off, or already inside the weight
        return weight
    with torch.no_grad():
        merged = weight.detach().clone()
        for name in layer.active_adapters:
            if name in layer.lora_A or name in getattr(layer, "lora_embedding_A", {}):
                merged += layer.get_delta_weight(name).to(merged.dtype)
    return merged
