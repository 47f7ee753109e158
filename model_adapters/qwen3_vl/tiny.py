"""The tiny Qwen3-VL of the zoo, built by :mod:`model_adapters.tiny`.

The real architecture at zoo size: a ViT with learned position embeddings interpolated to the image grid,
16-pixel patches merged 2×2 (so images snap to a 32-pixel grid, not Qwen2.5-VL's 28), DeepStack (features of an
early vision layer added into the first text layer) and *interleaved* M-RoPE. The tiny model keeps each of these,
so the adapter, vLLM and the trainer meet every one of them on CPU.
"""

from __future__ import annotations

from typing import Any

from model_adapters.tiny import (
    HIDDEN,
    VISION_HEADS,
    VISION_HIDDEN,
    VISION_LAYERS,
    TinyRecipe,
    text_common,
    video_processor,
)
from model_adapters.tiny_tokenizer import TokenizerSpec, token_ids

QWEN3_VL_PATCH = 16
QWEN3_VL_MERGE = 2
QWEN3_VL_FACTOR = QWEN3_VL_PATCH * QWEN3_VL_MERGE  # images are resized to multiples of 32 pixels
QWEN3_VL_MIN_PIXELS = 4 * QWEN3_VL_FACTOR**2  # 64×64 → 4 image tokens at least
QWEN3_VL_MAX_PIXELS = 64 * QWEN3_VL_FACTOR**2  # 256×256 → 64 image tokens at most

# The family's tokenizer for the tiny zoo (model_adapters.tiny_tokenizer trains it): its real special tokens
# and a chat template written to produce the family's published prompt layout.
CHAT_TEMPLATE = (  # Qwen3-VL instruct: as Qwen2.5-VL's layout but no default system turn
    "{% set image_count = namespace(value=0) %}"
    "{% for message in messages %}"
    "<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' or 'image' in part or 'image_url' in part %}"
    "{% set image_count.value = image_count.value + 1 %}"
    "{% if add_vision_id %}Picture {{ image_count.value }}: {% endif %}"
    "<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif part['type'] == 'video' or 'video' in part %}<|vision_start|><|video_pad|><|vision_end|>"
    "{% elif 'text' in part %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %}<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

TOKENIZER = TokenizerSpec(
    specials=(
        "<|endoftext|>",
        "<|im_start|>",
        "<|im_end|>",
        "<|vision_start|>",
        "<|vision_end|>",
        "<|vision_pad|>",
        "<|image_pad|>",
        "<|video_pad|>",
    ),
    bos=None,
    eos="<|im_end|>",
    pad="<|endoftext|>",
    chat_template=CHAT_TEMPLATE,
    named={"image_token": "<|image_pad|>", "video_token": "<|video_pad|>"},
    plain_added=("<think>", "</think>"),
    generation_eos=("<|im_end|>", "<|endoftext|>"),
)


def qwen3_vl_recipe(tok: Any) -> tuple[Any, Any]:
    """(config, processor factory) of the tiny Qwen3-VL, on the family's locally trained tokenizer ``tok``."""
    from transformers import Qwen3VLConfig  # lazy: transformers (only when a checkpoint is built)

    text = text_common(tok, TOKENIZER)
    # head_dim/2 = 16 rotary frequencies shared out (time, height, width) as the real 24/20/20 of 64, interleaved.
    text["rope_parameters"] = {
        "rope_type": "default",
        "rope_theta": 5_000_000.0,
        "mrope_section": [6, 5, 5],
        "mrope_interleaved": True,
    }
    vision = {
        "depth": VISION_LAYERS,
        "hidden_size": VISION_HIDDEN,
        "intermediate_size": 128,
        "num_heads": VISION_HEADS,
        "out_hidden_size": HIDDEN,
        "patch_size": QWEN3_VL_PATCH,
        "spatial_merge_size": QWEN3_VL_MERGE,
        "temporal_patch_size": 2,
        "num_position_embeddings": 256,  # a 16×16 grid, interpolated to each image's patch grid
        "deepstack_visual_indexes": [0],  # the first vision layer feeds the first text layer
    }
    ids = dict(
        zip(
            ("image_token_id", "video_token_id", "vision_start_token_id", "vision_end_token_id"),
            token_ids(tok, ["<|image_pad|>", "<|video_pad|>", "<|vision_start|>", "<|vision_end|>"]),
            strict=True,
        )
    )
    config = Qwen3VLConfig(text_config=text, vision_config=vision, tie_word_embeddings=False, **ids)
    for key in ("bos_token_id", "eos_token_id", "pad_token_id", "vocab_size"):
        setattr(config, key, text[key])  # vLLM and older readers look at the top level too

    def processor() -> Any:
        from transformers import Qwen2VLImageProcessor, Qwen3VLProcessor  # lazy: transformers

        image_processor = Qwen2VLImageProcessor(
            patch_size=QWEN3_VL_PATCH,
            merge_size=QWEN3_VL_MERGE,
            temporal_patch_size=2,
            image_mean=[0.5, 0.5, 0.5],
            image_std=[0.5, 0.5, 0.5],
            size={"shortest_edge": QWEN3_VL_MIN_PIXELS, "longest_edge": QWEN3_VL_MAX_PIXELS},
        )
        return Qwen3VLProcessor(
            image_processor=image_processor,
            tokenizer=tok,
            chat_template=tok.chat_template,
            video_processor=video_processor("Qwen3VLVideoProcessor"),
        )

    return config, processor


TINY = TinyRecipe("tiny-qwen3-vl", TOKENIZER, qwen3_vl_recipe)
