"""Presets: short names users type (``qwen2.5-vl-3b``) → adapter + where the weights live + defaults.

Real presets point at a hub id (loaded on the user's machine; nothing here downloads). Tiny presets point at a
tiny randomly initialised checkpoint of the same architecture, built locally by :mod:`model_adapters.tiny` on
first use and cached — the test suite and the CPU demo run on those. ``NAME@random`` and ``NAME@width-only``
are the published architecture of a real preset with random weights (:mod:`model_adapters.full_size`): full size,
or every width with one or two layers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from corl_vl.errors import CorlError

from .full_size_configs import FULL_SIZE, WIDTH_ONLY_LAYERS


@dataclass(frozen=True)
class Preset:
    """A named model: which adapter drives it and where its weights come from."""

    name: str
    adapter: str
    hub_id: str | None = None  # real weights (hub id); None for tiny presets
    tiny: bool = False  # built locally by model_adapters.tiny, cached
    random: str = ""  # "random" (published size) or "width-only": model_adapters.full_size, no weights stored
    description: str = ""
    defaults: dict[str, Any] = field(default_factory=dict)  # adapter keyword defaults


_REAL = [
    Preset("qwen2.5-vl-3b", "qwen2_5_vl", "Qwen/Qwen2.5-VL-3B-Instruct", description="Qwen2.5-VL 3B"),
    Preset("qwen2.5-vl-7b", "qwen2_5_vl", "Qwen/Qwen2.5-VL-7B-Instruct", description="Qwen2.5-VL 7B"),
    *(
        Preset(
            f"qwen3-vl-{size}",
            "qwen3_vl",
            f"Qwen/Qwen3-VL-{size.upper()}-Instruct",
            description=f"Qwen3-VL {size.upper()}",
        )
        for size in ("2b", "4b", "8b", "32b")
    ),
    *(
        Preset(
            f"qwen3-vl-{size}",
            "qwen3_vl_moe",
            f"Qwen/Qwen3-VL-{size.upper()}-Instruct",
            description=f"Qwen3-VL {size.upper()} (mixture of experts)",
        )
        for size in ("30b-a3b", "235b-a22b")
    ),
    Preset(
        "internvl3.5-2b",
        "internvl3_5",
        "OpenGVLab/InternVL3_5-2B-HF",
        description="InternVL3.5 2B (HF format)",
    ),
    Preset(
        "internvl3.5-8b",
        "internvl3_5",
        "OpenGVLab/InternVL3_5-8B-HF",
        description="InternVL3.5 8B (HF format)",
    ),
    Preset("gemma-3-4b", "gemma3", "google/gemma-3-4b-it", description="Gemma-3 4B instruct"),
    Preset("gemma-3-12b", "gemma3", "google/gemma-3-12b-it", description="Gemma-3 12B instruct"),
    Preset("qwen2.5-3b", "causal_lm", "Qwen/Qwen2.5-3B-Instruct", description="Qwen2.5 3B instruct (text)"),
    Preset("qwen2.5-7b", "causal_lm", "Qwen/Qwen2.5-7B-Instruct", description="Qwen2.5 7B instruct (text)"),
    Preset(
        "llama-3.2-3b-instruct",
        "causal_lm",
        "meta-llama/Llama-3.2-3B-Instruct",
        description="Llama-3.2 3B (text)",
    ),
    Preset(
        "llama-3.1-8b-instruct",
        "causal_lm",
        "meta-llama/Llama-3.1-8B-Instruct",
        description="Llama-3.1 8B (text)",
    ),
    Preset("qwen3-1.7b", "causal_lm", "Qwen/Qwen3-1.7B", description="Qwen3 1.7B (text)"),
]

_TINY = [
    Preset(
        "tiny-qwen2.5-vl", "qwen2_5_vl", tiny=True, description="random tiny Qwen2.5-VL (tests, CPU demo)"
    ),
    Preset(
        "tiny-internvl3.5",
        "internvl3_5",
        tiny=True,
        description="random tiny InternVL3.5 HF (tests, CPU demo)",
    ),
    Preset("tiny-gemma3", "gemma3", tiny=True, description="random tiny Gemma-3 (tests)"),
    Preset("tiny-qwen3-vl", "qwen3_vl", tiny=True, description="random tiny Qwen3-VL (tests)"),
    Preset("tiny-qwen3-vl-moe", "qwen3_vl_moe", tiny=True, description="random tiny Qwen3-VL MoE (tests)"),
    Preset("tiny-qwen2.5", "causal_lm", tiny=True, description="random tiny Qwen2 text model (tests)"),
    Preset("tiny-llama3", "causal_lm", tiny=True, description="random tiny Llama-3 text model (tests)"),
    Preset("tiny-qwen3", "causal_lm", tiny=True, description="random tiny Qwen3 text model (tests)"),
]

_VARIANT_HELP = {
    "random": "published size, random weights (no download)",
    "width-only": f"real widths, {WIDTH_ONLY_LAYERS} layers, random weights (CPU memory measurements)",
}
_RANDOM = [
    Preset(f"{p.name}@{variant}", p.adapter, random=variant, description=f"{p.description}: {text}")
    for p in _REAL
    if p.name in FULL_SIZE
    for variant, text in _VARIANT_HELP.items()
]

PRESETS: dict[str, Preset] = {p.name: p for p in _REAL + _TINY + _RANDOM}
# the demo's pair, (agent name, preset): two tiny VLMs of different families (corl_vl.experiment.demo_config,
# configs/demo.yaml)
DEMO_PAIR = (("qwen", "tiny-qwen2.5-vl"), ("internvl", "tiny-internvl3.5"))


def get_preset(name: str) -> Preset:
    """The preset called ``name``; an unknown name is one clear error listing what exists."""
    try:
        return PRESETS[name]
    except KeyError:
        raise CorlError(f"unknown model preset '{name}'; known presets: {', '.join(PRESETS)}") from None
