"""InternVL3.5's presets (HF-format 2B and 8B) and the tiny zoo model."""

from __future__ import annotations

from model_adapters.presets import Preset

from .full_size import FULL_SIZE
from .tiny import TINY

PRESETS = (
    Preset(
        "internvl3.5-2b",
        "internvl3_5",
        "OpenGVLab/InternVL3_5-2B-HF",
        description="InternVL3.5 2B (HF format)",
        full_size=FULL_SIZE["internvl3.5-2b"],
    ),
    Preset(
        "internvl3.5-8b",
        "internvl3_5",
        "OpenGVLab/InternVL3_5-8B-HF",
        description="InternVL3.5 8B (HF format)",
        full_size=FULL_SIZE["internvl3.5-8b"],
    ),
    Preset(
        "tiny-internvl3.5",
        "internvl3_5",
        tiny=TINY,
        description="random tiny InternVL3.5 HF (tests, CPU demo)",
    ),
)
