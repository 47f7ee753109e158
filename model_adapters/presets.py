"""Presets: short names users type (``qwen2.5-vl-3b``) → adapter + where the weights live + defaults.

Each built-in family declares its presets in ``model_adapters/<family>/presets.py``; this module gathers them in
the order of :data:`model_adapters.builtins.BUILTINS`. Real presets point at a hub id (loaded on the user's
machine; nothing here downloads). Tiny presets point at a tiny randomly initialised checkpoint of the same
architecture (the family's :class:`~model_adapters.tiny.TinyRecipe`), built locally on first use and cached — the
test suite and the CPU demo run on those. ``NAME@random`` and ``NAME@width-only`` are the published architecture
of a real preset with random weights (:mod:`model_adapters.full_size`): full size, or every width with one or two
layers; a real preset has them when its family wrote its published config down (``full_size``).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from functools import cache
from typing import TYPE_CHECKING, Any

from corl_vl.errors import CorlError

from .builtins import BUILTINS
from .full_size_configs import WIDTH_ONLY_LAYERS, FullSizeSpec

if TYPE_CHECKING:
    from .tiny import TinyRecipe


@dataclass(frozen=True)
class Preset:
    """A named model: which adapter drives it and where its weights come from."""

    name: str
    adapter: str
    hub_id: str | None = None  # real weights (hub id); None for tiny presets
    tiny: TinyRecipe | None = None  # built locally by model_adapters.tiny, cached
    random: str = ""  # "random" (published size) or "width-only": model_adapters.full_size, no weights stored
    description: str = ""
    defaults: dict[str, Any] = field(default_factory=dict)  # adapter keyword defaults
    full_size: FullSizeSpec | None = (
        None  # a real preset's published config: gives NAME@random, NAME@width-only
    )


_VARIANT_HELP = {
    "random": "published size, random weights (no download)",
    "width-only": f"real widths, {WIDTH_ONLY_LAYERS} layers, random weights (CPU memory measurements)",
}
VARIANTS = tuple(_VARIANT_HELP)


@cache
def all_presets() -> dict[str, Preset]:
    """Every built-in preset by name: the families' real presets, then their tiny ones, then the random variants."""
    declared = [p for module in BUILTINS for p in importlib.import_module(f"{module}.presets").PRESETS]
    real = [p for p in declared if p.tiny is None]
    random = [
        Preset(f"{p.name}@{variant}", p.adapter, random=variant, description=f"{p.description}: {text}")
        for p in real
        if p.full_size is not None
        for variant, text in _VARIANT_HELP.items()
    ]
    return {p.name: p for p in real + [p for p in declared if p.tiny is not None] + random}


def full_size_specs() -> dict[str, FullSizeSpec]:
    """The real presets whose published config is written down, by name."""
    return {name: p.full_size for name, p in all_presets().items() if p.full_size is not None}


# the demo's pair, (agent name, preset): two tiny VLMs of different families (corl_vl.experiment.demo_config,
# configs/demo.yaml)
DEMO_PAIR = (("qwen", "tiny-qwen2.5-vl"), ("internvl", "tiny-internvl3.5"))


def get_preset(name: str) -> Preset:
    """The preset called ``name``; an unknown name is one clear error listing what exists."""
    presets = all_presets()
    try:
        return presets[name]
    except KeyError:
        raise CorlError(f"unknown model preset '{name}'; known presets: {', '.join(presets)}") from None
