"""Gemma-3's published sizes (4B, 12B), written down so full-size models exist without the hub
(:mod:`model_adapters.full_size`), and its processor with the published image settings."""

from __future__ import annotations

from typing import Any

from model_adapters.full_size_configs import HF, FullSizeSpec, text_dims

from .tiny import TINY

# SigLIP-so400m at 896²: 64×64 patches average-pooled 4×4 → 256 soft tokens per image.
_SIGLIP = {
    "hidden_size": 1152,
    "intermediate_size": 4304,
    "num_hidden_layers": 27,
    "num_attention_heads": 16,
    "image_size": 896,
    "patch_size": 14,
}


def processor(spec: FullSizeSpec, tok: Any) -> Any:
    """The Gemma-3 processor at the published image size (one crop, pan-and-scan off)."""
    import transformers  # lazy: transformers (only when a folder is written)

    side = spec.image["size"]
    image_processor = transformers.Gemma3ImageProcessor(
        size={"height": side, "width": side}, do_pan_and_scan=False
    )
    return transformers.Gemma3Processor(
        image_processor=image_processor,
        tokenizer=tok,
        chat_template=tok.chat_template,
        image_seq_length=spec.image["tokens"],
    )


FULL_SIZE: dict[str, FullSizeSpec] = {
    "gemma-3-4b": FullSizeSpec(
        TINY,
        text_dims(
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
        processor=processor,
    ),
    "gemma-3-12b": FullSizeSpec(
        TINY,
        text_dims(
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
        processor=processor,
    ),
}
