"""The tiny Gemma-3 of the zoo: SigLIP tower, pooled soft tokens and a sliding/full attention text model at
≈ 2.5 M parameters, built by :mod:`model_adapters.tiny`; plus the two family fixes a random Gemma-3 needs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from model_adapters.tiny import (
    HEAD_DIM,
    VISION_HEADS,
    VISION_HIDDEN,
    VISION_LAYERS,
    TinyRecipe,
    text_common,
)
from model_adapters.tiny_tokenizer import TokenizerSpec, token_ids

GEMMA_IMAGE = 64  # 8×8 SigLIP patches, average-pooled 2×2 → 16 soft tokens
GEMMA_PATCH = 8
GEMMA_TOKENS = 16

# The family's tokenizer for the tiny zoo (model_adapters.tiny_tokenizer trains it): its real special tokens
# and a chat template written to produce the family's published prompt layout.
CHAT_TEMPLATE = (  # Gemma-3: BOS in the template, system text folded into the first user turn, role "model"
    "{{ bos_token }}"
    "{% if messages[0]['role'] == 'system' %}"
    "{% if messages[0]['content'] is string %}{% set first_prefix = messages[0]['content'] + '\n\n' %}"
    "{% else %}{% set first_prefix = messages[0]['content'][0]['text'] + '\n\n' %}{% endif %}"
    "{% set loop_messages = messages[1:] %}"
    "{% else %}{% set first_prefix = '' %}{% set loop_messages = messages %}{% endif %}"
    "{% for message in loop_messages %}"
    "{% set role = 'model' if message['role'] == 'assistant' else message['role'] %}"
    "<start_of_turn>{{ role }}\n{{ first_prefix if loop.first else '' }}"
    "{% if message['content'] is string %}{{ message['content'] | trim }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' %}<start_of_image>"
    "{% elif part['type'] == 'text' %}{{ part['text'] | trim }}{% endif %}"
    "{% endfor %}{% endif %}<end_of_turn>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}"
)

TOKENIZER = TokenizerSpec(
    specials=(
        "<pad>",
        "<eos>",
        "<bos>",
        "<unk>",
        "<start_of_turn>",
        "<end_of_turn>",
        "<start_of_image>",
        "<end_of_image>",
        "<image_soft_token>",
    ),
    bos="<bos>",
    eos="<eos>",
    pad="<pad>",
    unk="<unk>",
    chat_template=CHAT_TEMPLATE,
    named={
        "boi_token": "<start_of_image>",
        "eoi_token": "<end_of_image>",
        "image_token": "<image_soft_token>",
    },
    # vLLM's Gemma-3 processor looks these strings up in the vocabulary (as SentencePiece has them)
    plain_added=("\n", "\n\n", "\n\n\n", "\n\n\n\n"),
    add_bos=True,
    generation_eos=("<eos>", "<end_of_turn>"),
)


def _build(tok: Any) -> tuple[Any, Any]:
    """(config, processor factory) of the tiny Gemma-3, on the family's locally trained tokenizer ``tok``."""
    from transformers import Gemma3Config  # lazy: transformers (only when a checkpoint is built)

    text = text_common(tok, TOKENIZER)
    text.update(
        query_pre_attn_scalar=HEAD_DIM,
        sliding_window=512,
        layer_types=["sliding_attention", "full_attention"],
        hidden_activation="gelu_pytorch_tanh",
    )
    vision = {
        "model_type": "siglip_vision_model",
        "hidden_size": VISION_HIDDEN,
        "intermediate_size": 128,
        "num_hidden_layers": VISION_LAYERS,
        "num_attention_heads": VISION_HEADS,
        "image_size": GEMMA_IMAGE,
        "patch_size": GEMMA_PATCH,
        "vision_use_head": False,
    }
    boi, eoi, image = token_ids(tok, ["<start_of_image>", "<end_of_image>", "<image_soft_token>"])
    config = Gemma3Config(
        text_config=text,
        vision_config=vision,
        mm_tokens_per_image=GEMMA_TOKENS,
        boi_token_index=boi,
        eoi_token_index=eoi,
        image_token_index=image,
        tie_word_embeddings=False,
    )
    for key in ("bos_token_id", "eos_token_id", "pad_token_id", "vocab_size"):
        setattr(config, key, text[key])

    def processor() -> Any:
        from transformers import Gemma3ImageProcessor, Gemma3Processor  # lazy: transformers

        image_processor = Gemma3ImageProcessor(
            size={"height": GEMMA_IMAGE, "width": GEMMA_IMAGE}, do_pan_and_scan=False
        )
        return Gemma3Processor(
            image_processor=image_processor,
            tokenizer=tok,
            chat_template=tok.chat_template,
            image_seq_length=GEMMA_TOKENS,
        )

    return config, processor


def init_projection(model: Any) -> None:
    """Draw the projection from vision to text, which Gemma-3 zero-initialises (vision gradients would be exactly
    0); inside the seeded block, so still deterministic."""
    import torch  # lazy: torch (only when weights are built)

    weight = model.model.multi_modal_projector.mm_input_projection_weight
    with torch.no_grad():
        weight.normal_(0.0, weight.shape[0] ** -0.5)


def fix_saved_layout(out: Path) -> None:
    """Rename Gemma-3's saved vision weights to the hub layout ``vision_tower.vision_model.*`` that vLLM expects.

    transformers 5.19 saves ``vision_tower.*`` (no ``vision_model``); its loader accepts the hub layout too, so HF
    loading is unchanged (the reload test compares logits).
    """
    # lazy: safetensors (only when a checkpoint is built)
    from safetensors.torch import load_file, save_file

    path = out / "model.safetensors"
    tensors = load_file(path)
    renamed = {_gemma_hub_key(k): v for k, v in tensors.items()}
    save_file(dict(sorted(renamed.items())), path, metadata={"format": "pt"})


def _gemma_hub_key(key: str) -> str:
    if key.startswith("vision_tower.") and not key.startswith("vision_tower.vision_model."):
        return "vision_tower.vision_model." + key[len("vision_tower.") :]
    return key


TINY = TinyRecipe("tiny-gemma3", TOKENIZER, _build, post_init=init_projection, fix_saved=fix_saved_layout)
