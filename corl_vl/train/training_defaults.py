"""Settings applied to a trained model at the start of training: gradient checkpointing, dropout and TF32.

Why defaults that depend on the device: on a GPU, activations are what runs out first at real sizes, so
``train.gradient_checkpointing: null`` turns checkpointing on there (one extra forward per layer); on a CPU the
tiny models need no saving and the extra forward only costs time. Dropout is zeroed by default
(``train.disable_dropout``) as in TRL's GRPO: with dropout the gradient pass's logprobs are those of a randomly
thinned model, not of the policy that sampled, so the importance ratio and the "old" logprobs are off by noise.
On a CUDA device the fp32 matmuls that remain (LoRA adapters, an fp32 model) run in TF32 (:func:`tf32_settings`).
"""

from __future__ import annotations

import os
from typing import Any

# vLLM's GPU worker sets torch's fp32 matmul precision from this variable ("highest" unless set) when it starts:
# a colocated engine built after the trainer would switch TF32 off again for the trainer in the same process
VLLM_PRECISION_ENV = "VLLM_FLOAT32_MATMUL_PRECISION"


def tf32_settings(device: str) -> dict[str, str]:
    """The TF32 settings for training on ``device``: on CUDA, fp32 matmuls (``set_float32_matmul_precision``:
    "high" is TF32 on CUDA, the API vLLM and inductor read back) and cuDNN convolutions in TF32; nothing elsewhere
    (CPU runs keep torch's global settings)."""
    if not str(device).startswith("cuda"):
        return {}
    return {
        "float32_matmul_precision": "high",
        "cudnn_conv_fp32_precision": "tf32",
        VLLM_PRECISION_ENV: "high",
    }


def apply_tf32(settings: dict[str, str]) -> None:
    """Apply :func:`tf32_settings`' answer to this process (a user's own ``VLLM_FLOAT32_MATMUL_PRECISION`` wins)."""
    # lazy: torch
    import torch

    if "float32_matmul_precision" in settings:
        torch.set_float32_matmul_precision(settings["float32_matmul_precision"])
    conv = settings.get("cudnn_conv_fp32_precision")
    if (
        conv is not None and torch.backends.cudnn.conv.fp32_precision != conv
    ):  # torch's default is TF32 already
        torch.backends.cudnn.conv.fp32_precision = conv
    if VLLM_PRECISION_ENV in settings:
        os.environ.setdefault(VLLM_PRECISION_ENV, settings[VLLM_PRECISION_ENV])


def checkpointing_on(setting: bool | None, device: str) -> bool:
    """``train.gradient_checkpointing`` for a model trained on ``device`` (None → on for CUDA, off elsewhere)."""
    return str(device).startswith("cuda") if setting is None else bool(setting)


def zero_dropout(model: Any) -> int:
    """Every dropout probability of ``model`` set to 0: dropout modules' ``p`` and the float ``*dropout*``
    attributes attention modules read at call time; returns how many were non-zero."""
    import torch  # lazy: torch (the plan reads checkpointing_on without importing torch)

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
    """``train.gradient_checkpointing`` and ``train.disable_dropout`` on the model an agent trains, and TF32 when
    it trains on a CUDA device of this process (a device named without CUDA here changes no global setting)."""
    # lazy: torch
    import torch

    settings = tf32_settings(device)
    if settings and torch.cuda.is_available():
        apply_tf32(settings)
    if checkpointing_on(train.gradient_checkpointing, device):
        model.gradient_checkpointing_enable()
    if train.disable_dropout:
        zero_dropout(model)
