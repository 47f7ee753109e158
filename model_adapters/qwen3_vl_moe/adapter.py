"""Qwen3-VL mixture-of-experts sizes (30B-A3B, 235B-A22B): the dense Qwen3-VL adapter plus one weight-layout fix.

Prompts, images and positions are those of :class:`~model_adapters.qwen3_vl.adapter.Qwen3VLAdapter`. What differs is the
weight sync: transformers keeps the fused expert tensors as ``[experts, out, in]`` (``gate_up_proj``:
``[E, 2·moe_intermediate, hidden]``, ``down_proj``: ``[E, hidden, moe_intermediate]``) and saves them that way,
while the hub checkpoints, and so vLLM's loader, hold them transposed (``[E, in, out]``).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from model_adapters.qwen3_vl import Qwen3VLAdapter
from model_adapters.registry import register_adapter
from model_adapters.tiny import ensure_tiny

from .tiny import TINY
from .vllm_layout import to_vllm


@register_adapter("qwen3_vl_moe")
class Qwen3VLMoeAdapter(Qwen3VLAdapter):
    """Qwen3-VL MoE (``Qwen3VLMoeForConditionalGeneration``)."""

    model_types = ("qwen3_vl_moe",)
    zero3_sync_whole = True  # transformers' expert converter (a transpose check): no streamed ZeRO-3 sync

    def vllm_weights(self, name: str, tensor: Any) -> Iterable[tuple[str, Any]]:
        return to_vllm(name, tensor)

    @classmethod
    def tiny_checkpoint(cls, seed: int = 0) -> Path:
        return ensure_tiny(TINY, seed=seed)
