"""``train.freeze``: parts of every agent's model that do not train (no gradients, no optimizer state).

Why by part name: users freeze "the vision tower" (as EasyR1 does), not a list of parameter names; the adapter
says which parameters each part holds (:meth:`model_adapters.trainable_parts.TrainableParts.model_parts`).
Freezing is ``requires_grad=False`` before the optimizer is built, so the optimizer never sees those weights.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from corl_vl.errors import CorlError
from corl_vl.train.parts_check import applicable_freeze

_log = logging.getLogger(__name__)


def freeze_parts(model: Any, adapter: Any, names: Sequence[str], *, agent: str) -> list[str]:
    """Freeze the named parts of ``model`` (after LoRA, so adapters inside a frozen part freeze too); returns
    the frozen parameter names. An unknown part name is one line listing the family's parts. A text-only model
    has no vision part: a cohort-wide ``vision_tower`` or ``projector`` leaves it alone (parts_check.py)."""
    names = applicable_freeze(adapter, names)
    if not names:
        return []
    parts = adapter.model_parts(model)
    unknown = [n for n in names if n not in parts]
    if unknown:
        raise CorlError(
            f"train.freeze: '{unknown[0]}' is not a part of agent {agent}'s model ({adapter.name}); its parts "
            f"are {', '.join(parts)}"
        )
    frozen = []
    for name, param in model.named_parameters():
        if adapter.parts_of(parts, name) & set(names):
            param.requires_grad_(False)
            frozen.append(name)
    if not any(p.requires_grad for p in model.parameters()):
        raise CorlError(f"train.freeze: {', '.join(names)} leaves nothing of agent {agent}'s model to train")
    _log.info("agent %s: %d parameter tensors frozen (%s)", agent, len(frozen), ", ".join(names))
    return frozen
