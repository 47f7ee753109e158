"""The published sizes of every real preset, written down so full-size models exist without the hub.

Each entry holds the architecture-defining values of the checkpoint's published ``config.json`` (the source is
named per entry and in docs/adapters.md) and the parameter count its model card states. Only values that set a
tensor's shape, the attention layout or the image-token count are recorded: the rest (ids of special tokens,
rope scaling) comes from the tiny recipe of the same family, whose tokenizer and chat template the full-size
presets share.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

HF = "https://huggingface.co/"


@dataclass(frozen=True)
class FullSizeSpec:
    """One published architecture: ``tiny`` names the tiny recipe of the same family (classes, tokens)."""

    tiny: str
    text: dict[str, Any]
    source: str
    published_parameters: float  # the model card's total, in billions (rounded as the card rounds it)
    vision: dict[str, Any] = field(default_factory=dict)
    top: dict[str, Any] = field(default_factory=dict)  # composite-config keys (image tokens per image, …)
    image: dict[str, Any] = field(default_factory=dict)  # the image processor's published settings


def _text(
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


# Qwen2.5-VL's vision tower is the same 32-block ViT for 3B and 7B; only the merger's output width differs.
_QWEN_VIT = {
    "depth": 32,
    "hidden_size": 1280,
    "intermediate_size": 3420,
    "num_heads": 16,
    "patch_size": 14,
    "spatial_merge_size": 2,
    "temporal_patch_size": 2,
    "window_size": 112,
    "fullatt_block_indexes": [7, 15, 23, 31],
}
# preprocessor_config.json: 56² ≤ pixels ≤ 12,845,056 (= 16,384 merged 28² cells)
_QWEN_IMAGE = {"min_pixels": 3136, "max_pixels": 12_845_056}
# InternViT-300M-448px-V2.5: 24 layers of width 1024, one 448² tile → 1024 patches → pixel shuffle 0.5 → 256.
_INTERN_VIT = {
    "hidden_size": 1024,
    "num_hidden_layers": 24,
    "num_attention_heads": 16,
    "intermediate_size": 4096,
    "image_size": [448, 448],
    "patch_size": [14, 14],
}
# SigLIP-so400m at 896²: 64×64 patches average-pooled 4×4 → 256 soft tokens per image.
_SIGLIP = {
    "hidden_size": 1152,
    "intermediate_size": 4304,
    "num_hidden_layers": 27,
    "num_attention_heads": 16,
    "image_size": 896,
    "patch_size": 14,
}
_MROPE = {"rope_type": "default", "rope_theta": 1_000_000.0, "mrope_section": [16, 24, 24]}
_LLAMA3_ROPE = {
    "rope_type": "llama3",
    "rope_theta": 500_000.0,
    "factor": 32.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
}

FULL_SIZE: dict[str, FullSizeSpec] = {
    "qwen2.5-vl-3b": FullSizeSpec(
        "tiny-qwen2.5-vl",
        _text(2048, 11008, 36, 16, 2, 151_936, tied=True, rope_parameters=_MROPE),
        HF + "Qwen/Qwen2.5-VL-3B-Instruct/blob/main/config.json",
        3.75,
        vision={**_QWEN_VIT, "out_hidden_size": 2048},
        image=_QWEN_IMAGE,
    ),
    "qwen2.5-vl-7b": FullSizeSpec(
        "tiny-qwen2.5-vl",
        _text(3584, 18944, 28, 28, 4, 152_064, tied=False, rope_parameters=_MROPE),
        HF + "Qwen/Qwen2.5-VL-7B-Instruct/blob/main/config.json",
        8.29,
        vision={**_QWEN_VIT, "out_hidden_size": 3584},
        image=_QWEN_IMAGE,
    ),
    "internvl3.5-2b": FullSizeSpec(
        "tiny-internvl3.5",  # Qwen3-1.7B language model with an untied LM head (card: 0.3 B + 2.0 B)
        _text(2048, 6144, 28, 16, 8, 151_936, tied=False, head_dim=128),
        HF + "OpenGVLab/InternVL3_5-2B-HF/blob/main/config.json",
        2.3,
        vision=_INTERN_VIT,
        top={"image_seq_length": 256},
        image={"tile": 448, "tokens_per_tile": 256},
    ),
    "internvl3.5-8b": FullSizeSpec(
        "tiny-internvl3.5",
        _text(4096, 12288, 36, 32, 8, 151_936, tied=False, head_dim=128),
        HF + "OpenGVLab/InternVL3_5-8B-HF/blob/main/config.json",
        8.5,
        vision=_INTERN_VIT,
        top={"image_seq_length": 256},
        image={"tile": 448, "tokens_per_tile": 256},
    ),
    "gemma-3-4b": FullSizeSpec(
        "tiny-gemma3",
        _text(
            2560,
            10240,
            34,
            8,
            4,
            262_208,
            tied=True,
            head_dim=256,
            query_pre_attn_scalar=256,
            sliding_window=1024,
        ),
        HF + "google/gemma-3-4b-it/blob/main/config.json",
        4.3,
        vision=_SIGLIP,
        top={"mm_tokens_per_image": 256},
        image={"size": 896, "tokens": 256},
    ),
    "gemma-3-12b": FullSizeSpec(
        "tiny-gemma3",
        _text(
            3840,
            15360,
            48,
            16,
            8,
            262_208,
            tied=True,
            head_dim=256,
            query_pre_attn_scalar=256,
            sliding_window=1024,
        ),
        HF + "google/gemma-3-12b-it/blob/main/config.json",
        12.2,
        vision=_SIGLIP,
        top={"mm_tokens_per_image": 256},
        image={"size": 896, "tokens": 256},
    ),
    "qwen2.5-3b": FullSizeSpec(
        "tiny-qwen2.5",
        _text(2048, 11008, 36, 16, 2, 151_936, tied=True),
        HF + "Qwen/Qwen2.5-3B-Instruct/blob/main/config.json",
        3.09,
    ),
    "qwen2.5-7b": FullSizeSpec(
        "tiny-qwen2.5",
        _text(3584, 18944, 28, 28, 4, 152_064, tied=False),
        HF + "Qwen/Qwen2.5-7B-Instruct/blob/main/config.json",
        7.61,
    ),
    "llama-3.2-3b-instruct": FullSizeSpec(
        "tiny-llama3",
        _text(
            3072,
            8192,
            28,
            24,
            8,
            128_256,
            tied=True,
            rope_parameters=_LLAMA3_ROPE,
            max_position_embeddings=131_072,
        ),
        HF + "meta-llama/Llama-3.2-3B-Instruct/blob/main/config.json",
        3.21,
    ),
    "llama-3.1-8b-instruct": FullSizeSpec(
        "tiny-llama3",
        _text(
            4096,
            14336,
            32,
            32,
            8,
            128_256,
            tied=False,
            rope_parameters=_LLAMA3_ROPE,
            max_position_embeddings=131_072,
        ),
        HF + "meta-llama/Llama-3.1-8B-Instruct/blob/main/config.json",
        8.03,
    ),
    "qwen3-1.7b": FullSizeSpec(
        "tiny-qwen3",
        _text(2048, 6144, 28, 16, 8, 151_936, tied=True, head_dim=128),
        HF + "Qwen/Qwen3-1.7B/blob/main/config.json",
        1.7,
    ),
}

# The width-only variant: real widths, vocabulary, vision width and image processor; this many layers.
WIDTH_ONLY_LAYERS = 2
WIDTH_ONLY_VISION_LAYERS = 1
