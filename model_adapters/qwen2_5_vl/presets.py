"""Qwen2.5-VL's presets: the released 3B and 7B instruct models and the tiny zoo model."""

from __future__ import annotations

from model_adapters.presets import Preset

from .full_size import FULL_SIZE
from .tiny import TINY

PRESETS = (
    Preset(
        "qwen2.5-vl-3b",
        "qwen2_5_vl",
        "Qwen/Qwen2.5-VL-3B-Instruct",
        description="Qwen2.5-VL 3B",
        full_size=FULL_SIZE["qwen2.5-vl-3b"],
    ),
    Preset(
        "qwen2.5-vl-7b",
        "qwen2_5_vl",
        "Qwen/Qwen2.5-VL-7B-Instruct",
        description="Qwen2.5-VL 7B",
        full_size=FULL_SIZE["qwen2.5-vl-7b"],
    ),
    Preset(
        "tiny-qwen2.5-vl", "qwen2_5_vl", tiny=TINY, description="random tiny Qwen2.5-VL (tests, CPU demo)"
    ),
)
