"""Qwen3-VL (dense sizes): Qwen2.5-VL's prompt and position scheme on a 32-pixel grid.

What carries over from :class:`~model_adapters.qwen2_5_vl.adapter.Qwen25VLAdapter` unchanged, and why it is enough:
- images are snapped once to the processor's grid (``patch_size × merge_size`` read from the checkpoint: 32 here,
  28 for Qwen2.5-VL), so HF and vLLM receive identical pixels;
- every forward carries ``mm_token_type_ids``: Qwen3-VL's M-RoPE (interleaved over time/height/width) is built
  from it — transformers refuses image inputs without it rather than falling back to 1-D positions;
- placeholder ``<|image_pad|>``, stop ``<|im_end|>``, no BOS.
What differs lives in the checkpoint, not here: the template has no default system turn, and DeepStack feeds
vision features into the first text layers (the same parameters the trainer updates and vLLM reloads).
"""

from __future__ import annotations

from pathlib import Path

from model_adapters.qwen2_5_vl import Qwen25VLAdapter
from model_adapters.registry import register_adapter
from model_adapters.tiny import ensure_tiny

from .tiny import TINY


@register_adapter("qwen3_vl")
class Qwen3VLAdapter(Qwen25VLAdapter):
    """Qwen3-VL (``Qwen3VLForConditionalGeneration``) through its own processor and chat template."""

    model_types = ("qwen3_vl",)

    @classmethod
    def tiny_checkpoint(cls, seed: int = 0) -> Path:
        return ensure_tiny(TINY, seed=seed)
