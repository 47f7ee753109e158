"""Qwen3-VL MoE's weights in vLLM's layout: the fused expert tensors transposed back to the hub's ``[E, in, out]``
(transformers keeps and saves them as ``[experts, out, in]``). The adapter's weight hook and the tiny recipe both
use it."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

_FUSED_EXPERTS = (".mlp.experts.gate_up_proj", ".mlp.experts.down_proj")


def to_vllm(name: str, tensor: Any) -> Iterable[tuple[str, Any]]:
    """One checkpoint tensor as vLLM's loader reads it."""
    if name.endswith(_FUSED_EXPERTS) and tensor.dim() == 3:
        return ((name, tensor.transpose(-1, -2)),)  # vLLM transposes it back on load
    return ((name, tensor),)
