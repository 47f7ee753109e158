"""A tiny randomly initialised SmolVLM2 checkpoint (tests, CPU smoke runs), built the way corl-vl builds its zoo.

The real architecture at ≈ 3 M parameters: a SigLIP-style vision tower (64-pixel crops, 8-pixel patches), the
pixel-shuffle connector (scale 2: 16 image tokens per crop), a Llama text model with head size 32 (the smallest
vLLM's CPU attention accepts) and untied embeddings; the processor splits images larger than one crop into a
grid plus a global view, as the released checkpoints do. Tokenizer: corl-vl's locally trained BPE given this
family's special tokens and chat template (:func:`model_adapters.tiny_tokenizer.build_tokenizer` takes a spec).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from corl_vl.paths import cache_dir
from model_adapters.tiny_tokenizer import TokenizerSpec, build_tokenizer, token_ids

VERSION = 1  # bump when the recipe changes: cached folders are keyed by it
CROP = 64  # pixels per crop side (the released models use 512)
PATCH = 8
SCALE = 2  # pixel-shuffle factor of the connector
TOKENS_PER_CROP = (CROP // PATCH) ** 2 // SCALE**2  # 16

# SmolVLM2 instruct's template: "<|im_start|>User:<image>Q<end_of_utterance>\nAssistant:" for one image.
CHAT_TEMPLATE = (
    "<|im_start|>{% for message in messages %}{{ message['role'] | capitalize }}"
    "{% if message['content'] is string %}{{ ': ' + message['content'] }}"
    "{% else %}{% if message['content'][0]['type'] == 'image' %}{{ ':' }}{% else %}{{ ': ' }}{% endif %}"
    "{% for part in message['content'] %}"
    "{% if part['type'] == 'text' %}{{ part['text'] }}{% elif part['type'] == 'image' %}{{ '<image>' }}{% endif %}"
    "{% endfor %}{% endif %}<end_of_utterance>\n"
    "{% endfor %}{% if add_generation_prompt %}{{ 'Assistant:' }}{% endif %}"
)

_GRID = tuple(f"<row_{r}_col_{c}>" for r in range(1, 5) for c in range(1, 5))
SPEC = TokenizerSpec(
    specials=(
        "<|endoftext|>",
        "<|im_start|>",
        "<|im_end|>",
        "<end_of_utterance>",
        "<fake_token_around_image>",
        "<image>",
        "<global-img>",
        *_GRID,
    ),
    bos="<|im_start|>",
    eos="<end_of_utterance>",
    pad="<|im_end|>",
    chat_template=CHAT_TEMPLATE,
    named={
        "image_token": "<image>",
        "fake_image_token": "<fake_token_around_image>",
        "global_image_token": "<global-img>",
        "end_of_utterance_token": "<end_of_utterance>",
    },
    generation_eos=("<end_of_utterance>",),
)


def make_tiny_smolvlm(seed: int = 0) -> tuple[Any, Any]:
    """The tiny SmolVLM in memory (fp32, eval mode; weights from ``torch.manual_seed(seed)``) and its processor."""
    import torch
    from transformers import (
        GenerationConfig,
        SmolVLMConfig,
        SmolVLMForConditionalGeneration,
        SmolVLMImageProcessor,
        SmolVLMProcessor,
    )

    tok = build_tokenizer(SPEC)
    bos, eos, pad, image = token_ids(tok, [SPEC.bos, SPEC.eos, SPEC.pad, "<image>"])
    text = {
        "model_type": "llama",
        "vocab_size": len(tok),
        "hidden_size": 256,
        "intermediate_size": 768,
        "num_hidden_layers": 2,
        "num_attention_heads": 8,
        "num_key_value_heads": 4,
        "head_dim": 32,
        "max_position_embeddings": 4096,
        "rope_theta": 100_000.0,
        "bos_token_id": bos,
        "eos_token_id": eos,
        "pad_token_id": pad,
        "tie_word_embeddings": False,
    }
    vision = {
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "image_size": CROP,
        "patch_size": PATCH,
    }
    config = SmolVLMConfig(
        text_config=text,
        vision_config=vision,
        scale_factor=SCALE,
        image_token_id=image,
        pad_token_id=pad,
        tie_word_embeddings=False,
    )
    for key in ("bos_token_id", "eos_token_id", "vocab_size"):
        setattr(config, key, text[key])  # vLLM reads some of these at the top level
    config.dtype = torch.float32
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = SmolVLMForConditionalGeneration(config).eval()
    model.generation_config = GenerationConfig(bos_token_id=bos, eos_token_id=[eos], pad_token_id=pad)
    image_processor = SmolVLMImageProcessor(
        size={"longest_edge": 2 * CROP}, max_image_size={"longest_edge": CROP}, do_image_splitting=True
    )
    processor = SmolVLMProcessor(
        image_processor=image_processor,
        tokenizer=tok,
        video_processor=_video_processor(),
        image_seq_len=TOKENS_PER_CROP,
        chat_template=CHAT_TEMPLATE,
    )
    return model, processor


def _video_processor() -> Any:
    from transformers import SmolVLMVideoProcessor

    return SmolVLMVideoProcessor()


def ensure_tiny_smolvlm(seed: int = 0) -> Path:
    """The cached tiny SmolVLM checkpoint folder for ``seed`` (built once, renamed into place atomically)."""
    root = cache_dir() / "tiny"
    target = root / f"tiny-smolvlm-plugin-seed{seed}-v{VERSION}"
    if (target / "config.json").exists():
        return target
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=root))
    try:
        model, processor = make_tiny_smolvlm(seed)
        model.save_pretrained(tmp)
        processor.save_pretrained(tmp)
        try:
            os.rename(tmp, target)  # atomic; a racing builder that finished first wins
        except OSError:
            if not (target / "config.json").exists():
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return target
