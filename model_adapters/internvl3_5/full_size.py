"""InternVL3.5's published sizes (2B, 8B; HF format), written down so full-size models exist without the hub
(:mod:`model_adapters.full_size`), and its processor with the published image settings."""

from __future__ import annotations

from typing import Any

from model_adapters.full_size_configs import HF, FullSizeSpec, text_dims
from model_adapters.tiny import video_processor

from .tiny import TINY

# InternViT-300M-448px-V2.5: 24 layers of width 1024, one 448² tile → 1024 patches → pixel shuffle 0.5 → 256.
_INTERN_VIT = {
    "hidden_size": 1024,
    "num_hidden_layers": 24,
    "num_attention_heads": 16,
    "intermediate_size": 4096,
    "image_size": [448, 448],
    "patch_size": [14, 14],
}


def processor(spec: FullSizeSpec, tok: Any) -> Any:
    """The InternVL processor with the published tile size, one tile per image as the paper runs it."""
    import transformers  # lazy: transformers (only when a folder is written)

    tok.init_kwargs["crop_to_patches"] = False  # one tile, as the tiny zoo and the paper run it
    tile = spec.image["tile"]
    image_processor = transformers.GotOcr2ImageProcessor(
        size={"height": tile, "width": tile}, crop_to_patches=False, min_patches=1, max_patches=12
    )
    return transformers.InternVLProcessor(
        image_processor=image_processor,
        tokenizer=tok,
        chat_template=tok.chat_template,
        video_processor=video_processor("InternVLVideoProcessor"),
        image_seq_length=spec.image["tokens_per_tile"],
    )


FULL_SIZE: dict[str, FullSizeSpec] = {
    "internvl3.5-2b": FullSizeSpec(
        TINY,  # Qwen3-1.7B language model with an untied LM head (card: 0.3 B + 2.0 B)
        text_dims(2048, 6144, 28, 16, 8, 151_936, tied=False, head_dim=128),
        HF + "OpenGVLab/InternVL3_5-2B-HF/blob/main/config.json",
        2.3,
        vision=_INTERN_VIT,
        top={"image_seq_length": 256},
        image={"tile": 448, "tokens_per_tile": 256},
        processor=processor,
    ),
    "internvl3.5-8b": FullSizeSpec(
        TINY,
        text_dims(4096, 12288, 36, 32, 8, 151_936, tied=False, head_dim=128),
        HF + "OpenGVLab/InternVL3_5-8B-HF/blob/main/config.json",
        8.5,
        vision=_INTERN_VIT,
        top={"image_seq_length": 256},
        image={"tile": 448, "tokens_per_tile": 256},
        processor=processor,
    ),
}
