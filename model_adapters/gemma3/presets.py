"""Gemma-3's presets (4B and 12B instruct) and the tiny zoo model."""

from __future__ import annotations

from model_adapters.presets import Preset

from .full_size import FULL_SIZE
from .tiny import TINY

PRESETS = (
    Preset(
        "gemma-3-4b",
        "gemma3",
        "google/gemma-3-4b-it",
        description="Gemma-3 4B instruct",
        full_size=FULL_SIZE["gemma-3-4b"],
    ),
    Preset(
        "gemma-3-12b",
        "gemma3",
        "google/gemma-3-12b-it",
        description="Gemma-3 12B instruct",
        full_size=FULL_SIZE["gemma-3-12b"],
    ),
    Preset("tiny-gemma3", "gemma3", tiny=TINY, description="random tiny Gemma-3 (tests)"),
)
