"""Qwen3-VL's dense presets (2B–32B) and the tiny zoo model; no published config is written down yet, so no
``@random`` variants."""

from __future__ import annotations

from model_adapters.presets import Preset

from .tiny import TINY

PRESETS = (
    *(
        Preset(
            f"qwen3-vl-{size}",
            "qwen3_vl",
            f"Qwen/Qwen3-VL-{size.upper()}-Instruct",
            description=f"Qwen3-VL {size.upper()}",
        )
        for size in ("2b", "4b", "8b", "32b")
    ),
    Preset("tiny-qwen3-vl", "qwen3_vl", tiny=TINY, description="random tiny Qwen3-VL (tests)"),
)
