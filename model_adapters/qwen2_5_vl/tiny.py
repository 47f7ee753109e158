"""The tiny Qwen2.5-VL of the zoo: the real architecture (M-RoPE, windowed ViT, 28-pixel grid) at ≈ 2.5 M
parameters, built by :mod:`model_adapters.tiny`."""

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

QWEN_VL_MIN_PIXELS = 4 * 28 * 28  # 56×56 → 4 image tokens at least
QWEN_VL_MAX_PIXELS = 64 * 28 * 28  # 224×224 → 64 image tokens at most; 128×128 → 16

# The family's tokenizer for the tiny zoo (model_adapters.tiny_tokenizer trains it): its real special tokens
# and a chat template written to produce the family's published prompt layout.
CHAT_TEMPLATE = (
    "{% set image_count = namespace(value=0) %}"
    "{% for message in messages %}"
    "{% if loop.first and message['role'] != 'system' %}"
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
    "{% endif %}"
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
    generation_eos=("<|im_end|>", "<|endoftext|>"),
)


def _build(tok: Any) -> tuple[Any, Any]:
    """(config, processor factory) of the tiny Qwen2.5-VL, on the family's locally trained tokenizer ``tok``."""
    from transformers import Qwen2_5_VLConfig  # lazy: transformers (only when a checkpoint is built)

    text = text_common(tok, TOKENIZER)
    # M-RoPE splits head_dim/2 = 16 rotary frequencies over (time, height, width), as the real 16/24/24 of 64.
    text["rope_parameters"] = {"rope_type": "default", "rope_theta": 1_000_000.0, "mrope_section": [4, 6, 6]}
    vision = {
        "depth": VISION_LAYERS,
        "hidden_size": VISION_HIDDEN,
        "intermediate_size": 128,
        "num_heads": VISION_HEADS,
        "out_hidden_size": HIDDEN,  # the merger projects straight into the text width
        "patch_size": 14,
        "spatial_merge_size": 2,
        "temporal_patch_size": 2,
        "window_size": 112,
        "fullatt_block_indexes": [VISION_LAYERS - 1],
    }
    ids = dict(
        zip(
            ("image_token_id", "video_token_id", "vision_start_token_id", "vision_end_token_id"),
            token_ids(tok, ["<|image_pad|>", "<|video_pad|>", "<|vision_start|>", "<|vision_end|>"]),
            strict=True,
        )
    )
    config = Qwen2_5_VLConfig(text_config=text, vision_config=vision, tie_word_embeddings=False, **ids)
    for key in ("bos_token_id", "eos_token_id", "pad_token_id", "vocab_size"):
        setattr(config, key, text[key])  # vLLM and older readers look at the top level too

    def processor() -> Any:
        from transformers import Qwen2_5_VLProcessor, Qwen2VLImageProcessor  # lazy: transformers

        image_processor = Qwen2VLImageProcessor(
            size={"shortest_edge": QWEN_VL_MIN_PIXELS, "longest_edge": QWEN_VL_MAX_PIXELS}
        )
        return Qwen2_5_VLProcessor(
            image_processor=image_processor,
            tokenizer=tok,
            chat_template=tok.chat_template,
            video_processor=video_processor("Qwen2VLVideoProcessor"),
        )

    return config, processor


TINY = TinyRecipe("tiny-qwen2.5-vl", TOKENIZER, _build)
