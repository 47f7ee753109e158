"""The built-in model families: one package each under ``model_adapters/``, registered like a plug-in.

Adding a family is one folder (``model_adapters/<family>/``: adapter, presets, tiny recipe, published full-size
configs) plus one line here. Importing a family package registers its adapter (``@register_adapter``); its
``presets`` module lists the names users type. The order is the order presets are listed in.
"""

from __future__ import annotations

BUILTINS: tuple[str, ...] = (
    "model_adapters.qwen2_5_vl",
    "model_adapters.qwen3_vl",
    "model_adapters.qwen3_vl_moe",
    "model_adapters.internvl3_5",
    "model_adapters.gemma3",
    "model_adapters.causal_lm",
)
