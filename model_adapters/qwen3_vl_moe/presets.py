"""Qwen3-VL's mixture-of-experts presets (30B-A3B, 235B-A22B) and the tiny zoo model."""

from __future__ import annotations

from model_adapters.presets import Preset

from .tiny import TINY

PRESETS = (
    *(
        Preset(
            f"qwen3-vl-{size}",
            "qwen3_vl_moe",
            f"Qwen/Qwen3-VL-{size.upper()}-Instruct",
            description=f"Qwen3-VL {size.upper()} (mixture of experts)",
        )
        for size in ("30b-a3b", "235b-a22b")
    ),
    Preset("tiny-qwen3-vl-moe", "qwen3_vl_moe", tiny=TINY, description="random tiny Qwen3-VL MoE (tests)"),
)
