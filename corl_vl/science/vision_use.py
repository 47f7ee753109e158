"""Evidence that a VLM's training used its vision path: how far each tower's weights moved.

Why: a toy experiment on pictures could still be solved without looking (from the question alone, or through
the language model only); then the vision tower would receive no useful gradient and stay where it started.
Reporting the relative weight change of every part — the vision tower, the projector between vision and text,
the language model — makes that visible, next to the blanked-image accuracy (:func:`heldout.blank_images`).

Family-agnostic by construction: the language model is what Hugging Face's ``get_decoder()`` returns and the
output head what ``get_output_embeddings()`` returns; every other parameter belongs to the vision side and is
grouped by its module path (``model.visual``, ``model.vision_tower``, ``model.multi_modal_projector``, as
each family names them), so no family name is checked here.
"""

from __future__ import annotations

import math
from typing import Any

TEXT = "language_model"
HEAD = "output_head"


def parameter_groups(model: Any) -> dict[str, list[str]]:
    """Parameter names of ``model`` by part: the language model, the output head, and each vision module."""
    decoder = {id(p) for p in model.get_decoder().parameters()}
    head_module = model.get_output_embeddings()
    head = {id(p) for p in head_module.parameters()} if head_module is not None else set()
    groups: dict[str, list[str]] = {}
    for name, param in model.named_parameters():
        if id(param) in decoder:
            key = TEXT
        elif id(param) in head:
            key = HEAD
        else:
            parts = name.split(".")
            key = ".".join(parts[:2]) if parts[0] == "model" and len(parts) > 2 else parts[0]
        groups.setdefault(key, []).append(name)
    return groups


def snapshot(model: Any) -> dict[str, Any]:
    """A detached CPU copy of every parameter (the 'before' of :func:`relative_change`)."""
    return {name: p.detach().to("cpu", copy=True) for name, p in model.named_parameters()}


def relative_change(before: dict[str, Any], model: Any) -> dict[str, float]:
    """Per part: ‖θ_after − θ_before‖ / ‖θ_before‖ (Frobenius norms over all of the part's parameters)."""
    after = dict(model.named_parameters())
    result = {}
    for group, names in parameter_groups(model).items():
        diff = sum(float((after[n].detach().cpu() - before[n]).pow(2).sum()) for n in names)
        base = sum(float(before[n].pow(2).sum()) for n in names)
        result[group] = math.sqrt(diff) / math.sqrt(base) if base > 0 else 0.0
    return result


def vision_groups(changes: dict[str, float]) -> dict[str, float]:
    """The vision-side entries of a :func:`relative_change` result."""
    return {k: v for k, v in changes.items() if k not in (TEXT, HEAD)}
