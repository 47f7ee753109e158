"""What a family writes down about a real preset's published size (in ``model_adapters/<family>/full_size.py``),
so full-size models exist without the hub.

Each :class:`FullSizeSpec` holds the architecture-defining values of the checkpoint's published ``config.json`` (the source is
named per entry and in docs/adapters.md) and the parameter count its model card states. Only values that set a
tensor's shape, the attention layout or the image-token count are recorded: the rest (ids of special tokens,
rope scaling) comes from the tiny recipe of the same family, whose tokenizer and chat template the full-size
presets share.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .tiny import TinyRecipe

HF = "https://huggingface.co/"


@dataclass(frozen=True)
class FullSizeSpec:
    """One published architecture: ``tiny`` is the tiny recipe of the same family (classes, tokens)."""

    tiny: TinyRecipe
    text: dict[str, Any]
    source: str
    published_parameters: float  # the model card's total, in billions (rounded as the card rounds it)
    vision: dict[str, Any] = field(default_factory=dict)
    top: dict[str, Any] = field(default_factory=dict)  # composite-config keys (image tokens per image, …)
    image: dict[str, Any] = field(default_factory=dict)  # the image processor's published settings
    # (spec, tokenizer) → the family's processor with the published image settings; None for text models
    processor: Callable[[FullSizeSpec, Any], Any] | None = None


def text_dims(
    hidden: int,
    ffn: int,
    layers: int,
    heads: int,
    kv: int,
    vocab: int,
    *,
    tied: bool,
    head_dim: int = 0,
    **more: Any,
) -> dict[str, Any]:
    """The text decoder's shape-setting config values, as published."""
    return {
        "hidden_size": hidden,
        "intermediate_size": ffn,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv,
        "head_dim": head_dim or hidden // heads,
        "vocab_size": vocab,
        "tie_word_embeddings": tied,
        **more,
    }


# The width-only variant: real widths, vocabulary, vision width and image processor; this many layers.
WIDTH_ONLY_LAYERS = 2
WIDTH_ONLY_VISION_LAYERS = 1
