"""Settings applied to a trained model at the start of training: gradient checkpointing and dropout.

Why defaults that depend on the device: on a GPU, activations are what runs out first at real sizes, so
``train.gradient_checkpointing: null`` turns checkpointing on there (one extra forward per layer); on a CPU the
tiny models need no saving and the extra forward only costs time. Dropout is zeroed by default
(``train.disable_dropout``) as in TRL's GRPO: with dropout the gradient pass's logprobs are those of a randomly
thinned model, not of the policy that sampled, so the importance ratio and the "old" logprobs are off by noise.
"""

from __future__ import annotations

from typing import Any


def checkpointing_on(setting: bool | None, device: str) -> bool:
    """``train.gradient_checkpointing`` for a model trained on ``device`` (None → on for CUDA, off elsewhere)."""
    return str(device).startswith("cuda") if setting is None else bool(setting)


def zero_dropout(model: Any) -> int:
    """Every dropout probability of ``model`` set to 0: dropout modules' ``p`` and the float ``*dropout*``
    attributes attention modules read at call time; returns how many were non-zero."""
    import torch  # here: the plan reads checkpointing_on without importing torch

    changed = 0
    for module in model.modules():
        if isinstance(module, torch.nn.modules.dropout._DropoutNd):
            changed += module.p != 0
            module.p = 0.0
        for key, value in list(vars(module).items()):
            if "dropout" in key and isinstance(value, float):
                changed += value != 0
                setattr(module, key, 0.0)
    return changed


def apply_training_defaults(model: Any, train: Any, device: str) -> None:
    """``train.gradient_checkpointing`` and ``train.disable_dropout`` on the model an agent trains."""
    if checkpointing_on(train.gradient_checkpointing, device):
        model.gradient_checkpointing_enable()
    if train.disable_dropout:
        zero_dropout(model)
