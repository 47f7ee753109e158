"""Qwen2.5-VL's published sizes (3B, 7B), written down so full-size models exist without the hub
(:mod:`model_adapters.full_size`), and its processor with the published image settings."""

from __future__ import annotations

from typing import Any

from model_adapters.full_size_configs import HF, FullSizeSpec, text_dims
from model_adapters.tiny import video_processor

from .tiny import TINY

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
_MROPE = {"rope_type": "default", "rope_theta": 1_000_000.0, "mrope_section": [16, 24, 24]}


def processor(spec: FullSizeSpec, tok: Any) -> Any:
    """The Qwen2.5-VL processor with the published pixel bounds (the tiny zoo's uses tiny images)."""
    import transformers  # lazy: transformers (only when a folder is written)

    size = {"shortest_edge": spec.image["min_pixels"], "longest_edge": spec.image["max_pixels"]}
    return transformers.Qwen2_5_VLProcessor(
        image_processor=transformers.Qwen2VLImageProcessor(size=size),
        tokenizer=tok,
        chat_template=tok.chat_template,
        video_processor=video_processor("Qwen2VLVideoProcessor"),
    )


FULL_SIZE: dict[str, FullSizeSpec] = {
    "qwen2.5-vl-3b": FullSizeSpec(
        TINY,
        text_dims(2048, 11008, 36, 16, 2, 151_936, tied=True, rope_parameters=_MROPE),
        HF + "Qwen/Qwen2.5-VL-3B-Instruct/blob/main/config.json",
        3.75,
        vision={**_QWEN_VIT, "out_hidden_size": 2048},
        image=_QWEN_IMAGE,
        processor=processor,
    ),
    "qwen2.5-vl-7b": FullSizeSpec(
        TINY,
        text_dims(3584, 18944, 28, 28, 4, 152_064, tied=False, rope_parameters=_MROPE),
        HF + "Qwen/Qwen2.5-VL-7B-Instruct/blob/main/config.json",
        8.29,
        vision={**_QWEN_VIT, "out_hidden_size": 3584},
        image=_QWEN_IMAGE,
        processor=processor,
    ),
}
