"""The tiny InternVL3.5 (HF format) of the zoo: InternViT with pixel shuffle and a Qwen3 language model at
≈ 2.5 M parameters, built by :mod:`model_adapters.tiny`."""

from __future__ import annotations

from typing import Any

from model_adapters.tiny import (
    VISION_HEADS,
    VISION_HIDDEN,
    VISION_LAYERS,
    TinyRecipe,
    text_common,
    video_processor,
)
from model_adapters.tiny_tokenizer import TokenizerSpec, token_ids

INTERNVL_IMAGE = 64  # one 64×64 tile, 8×8 patches, pixel-shuffle 0.5 → 16 image tokens
INTERNVL_PATCH = 8

# The family's tokenizer for the tiny zoo (model_adapters.tiny_tokenizer trains it): its real special tokens
# and a chat template written to produce the family's published prompt layout.
CHAT_TEMPLATE = (  # InternVL HF format: ChatML; the processor expands <IMG_CONTEXT> into <img>…</img>
    "{% for message in messages %}"
    "<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' %}<IMG_CONTEXT>\n"
    "{% elif part['type'] == 'video' %}<video>\n"
    "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %}<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

TOKENIZER = TokenizerSpec(
    specials=("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<img>", "</img>", "<IMG_CONTEXT>", "<video>"),
    bos=None,
    eos="<|im_end|>",
    pad="<|endoftext|>",
    chat_template=CHAT_TEMPLATE,
    named={
        "start_image_token": "<img>",
        "end_image_token": "</img>",
        "context_image_token": "<IMG_CONTEXT>",
        "video_token": "<video>",
    },
    plain_added=("<think>", "</think>"),
    generation_eos=("<|im_end|>", "<|endoftext|>"),
)


def _build(tok: Any) -> tuple[Any, Any]:
    """(config, processor factory) of the tiny InternVL3.5, on the family's locally trained tokenizer ``tok``."""
    from transformers import InternVLConfig  # lazy: transformers (only when a checkpoint is built)

    text = text_common(tok, TOKENIZER)
    text.update(model_type="qwen3", rope_theta=1_000_000.0)  # InternVL3.5 pairs its ViT with a Qwen3 LLM
    vision = {
        "hidden_size": VISION_HIDDEN,
        "num_hidden_layers": VISION_LAYERS,
        "num_attention_heads": VISION_HEADS,
        "intermediate_size": 128,
        "image_size": [INTERNVL_IMAGE, INTERNVL_IMAGE],
        "patch_size": [INTERNVL_PATCH, INTERNVL_PATCH],
        "use_mean_pooling": True,
        "norm_type": "layer_norm",
    }
    seq_len = (INTERNVL_IMAGE // INTERNVL_PATCH) ** 2 // 4
    (image_id,) = token_ids(tok, ["<IMG_CONTEXT>"])
    config = InternVLConfig(
        text_config=text,
        vision_config=vision,
        image_token_id=image_id,
        image_seq_length=seq_len,
        downsample_ratio=0.5,
        tie_word_embeddings=False,
    )
    for key in ("bos_token_id", "eos_token_id", "pad_token_id", "vocab_size"):
        setattr(config, key, text[key])

    def processor() -> Any:
        from transformers import GotOcr2ImageProcessor, InternVLProcessor  # lazy: transformers

        # InternVLProcessor's class defaults force crop_to_patches=True over the image processor's own setting;
        # tokenizer init kwargs are the one saved place that outranks them, so the default really is one tile
        # (for HF and for vLLM, which calls the same processor). Callers may still pass crop_to_patches.
        tok.init_kwargs["crop_to_patches"] = False

        image_processor = GotOcr2ImageProcessor(
            size={"height": INTERNVL_IMAGE, "width": INTERNVL_IMAGE},
            crop_to_patches=False,  # one tile, as the paper's release runs it
            min_patches=1,
            max_patches=12,
        )
        return InternVLProcessor(
            image_processor=image_processor,
            tokenizer=tok,
            chat_template=tok.chat_template,
            video_processor=video_processor("InternVLVideoProcessor"),
            image_seq_length=seq_len,
        )

    return config, processor


TINY = TinyRecipe("tiny-internvl3.5", TOKENIZER, _build)
