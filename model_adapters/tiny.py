"""Tiny randomly initialised checkpoints of the real architectures (the test suite's and CPU demo's models).

There is no model hub here and real checkpoints are gigabytes, yet adapters, rollout engines (HF and vLLM) and the
trainer must be exercised on the *real* model classes, processors and prompt formats. Each tiny preset is a genuine
Hugging Face folder — config, fp32 safetensors (random, deterministic from ``seed``), a locally trained tokenizer
(:mod:`model_adapters.tiny_tokenizer`), chat template and, for VLMs, the processor configs — at a few million
parameters, with dimensions vLLM's CPU backend accepts (attention head size ≥ 32, untied embeddings).

:func:`ensure_tiny` builds a preset once per (name, seed, recipe ``VERSION``) into the project cache, atomically.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from corl_vl.errors import CorlError
from corl_vl.paths import cache_dir
from model_adapters.tiny_qwen3_vl import qwen3_vl_recipe
from model_adapters.tiny_qwen3_vl_moe import qwen3_vl_moe_recipe
from model_adapters.tiny_tokenizer import SPECS, build_tokenizer, token_ids

_BUILD_LOCK = threading.Lock()
VERSION = 4  # bump whenever a recipe below (or the tokenizer corpus) changes: cached folders are keyed by it

# ≈ 2.5 M parameters per model: big enough to be a real network, small enough for a CPU GRPO step in seconds.
HIDDEN = 256  # text hidden size; 8 heads of 32 — 32 is the smallest head size vLLM's CPU attention accepts
HEADS = 8
HEAD_DIM = 32
KV_HEADS = 4  # grouped-query attention, as every family here uses
LAYERS = 2
FFN = 768
VISION_HIDDEN = 64  # 2 heads of 32
VISION_HEADS = 2
VISION_LAYERS = 2


def _text_common(tok, family: str) -> dict[str, Any]:
    """Vocabulary size and the explicit bos/eos/pad ids every text config gets."""
    spec = SPECS[family]
    pad_id, eos_id = token_ids(tok, [spec.pad, spec.eos])
    # Families whose tokenizer has no BOS (Qwen) still name one in their config: <|endoftext|>, like the hub's.
    bos_id = token_ids(tok, [spec.bos or spec.pad])[0]
    return {
        "vocab_size": len(tok),
        "hidden_size": HIDDEN,
        "intermediate_size": FFN,
        "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS,
        "head_dim": HEAD_DIM,
        "max_position_embeddings": 4096,
        "bos_token_id": bos_id,
        "eos_token_id": eos_id,
        "pad_token_id": pad_id,
        "tie_word_embeddings": False,
    }


# --------------------------------------------------------------------------------------------------------------
# Text models
# --------------------------------------------------------------------------------------------------------------


def _qwen2(tok):
    from transformers import Qwen2Config

    return Qwen2Config(**_text_common(tok, "qwen2"), rope_theta=1_000_000.0), None


def _qwen3(tok):
    from transformers import Qwen3Config

    return Qwen3Config(**_text_common(tok, "qwen3"), rope_theta=1_000_000.0), None


def _llama3(tok):
    from transformers import LlamaConfig

    rope = {
        "rope_type": "llama3",
        "rope_theta": 500_000.0,
        "factor": 32.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 2048,  # must stay below max_position_embeddings (4096)
    }
    return LlamaConfig(**_text_common(tok, "llama3"), rope_parameters=rope, hidden_act="silu"), None


# --------------------------------------------------------------------------------------------------------------
# Vision-language models: (config, processor factory)
# --------------------------------------------------------------------------------------------------------------

QWEN_VL_MIN_PIXELS = 4 * 28 * 28  # 56×56 → 4 image tokens at least
QWEN_VL_MAX_PIXELS = 64 * 28 * 28  # 224×224 → 64 image tokens at most; 128×128 → 16


def _qwen2_5_vl(tok):
    from transformers import Qwen2_5_VLConfig

    text = _text_common(tok, "qwen2_5_vl")
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

    def processor():
        from transformers import Qwen2_5_VLProcessor, Qwen2VLImageProcessor

        image_processor = Qwen2VLImageProcessor(
            size={"shortest_edge": QWEN_VL_MIN_PIXELS, "longest_edge": QWEN_VL_MAX_PIXELS}
        )
        return Qwen2_5_VLProcessor(
            image_processor=image_processor,
            tokenizer=tok,
            chat_template=tok.chat_template,
            video_processor=_video("Qwen2VLVideoProcessor"),
        )

    return config, processor


INTERNVL_IMAGE = 64  # one 64×64 tile, 8×8 patches, pixel-shuffle 0.5 → 16 image tokens
INTERNVL_PATCH = 8


def _internvl(tok):
    from transformers import InternVLConfig

    text = _text_common(tok, "internvl")
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

    def processor():
        from transformers import GotOcr2ImageProcessor, InternVLProcessor

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
            video_processor=_video("InternVLVideoProcessor"),
            image_seq_length=seq_len,
        )

    return config, processor


GEMMA_IMAGE = 64  # 8×8 SigLIP patches, average-pooled 2×2 → 16 soft tokens
GEMMA_PATCH = 8
GEMMA_TOKENS = 16


def _gemma3(tok):
    from transformers import Gemma3Config

    text = _text_common(tok, "gemma3")
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

    def processor():
        from transformers import Gemma3ImageProcessor, Gemma3Processor

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


def _video(class_name: str):
    """The family's video processor (its Processor class refuses to build without one; needs torchvision)."""
    import transformers

    return getattr(transformers, class_name)()


# name → (tokenizer family, recipe(tokenizer) → (config, processor factory or None), Auto model class name)
TINY_BUILDERS: dict[str, tuple[str, Callable, str]] = {
    "tiny-qwen2.5-vl": ("qwen2_5_vl", _qwen2_5_vl, "AutoModelForImageTextToText"),
    "tiny-internvl3.5": ("internvl", _internvl, "AutoModelForImageTextToText"),
    "tiny-gemma3": ("gemma3", _gemma3, "AutoModelForImageTextToText"),
    "tiny-qwen3-vl": ("qwen3_vl", qwen3_vl_recipe, "AutoModelForImageTextToText"),
    "tiny-qwen3-vl-moe": ("qwen3_vl", qwen3_vl_moe_recipe, "AutoModelForImageTextToText"),
    "tiny-qwen2.5": ("qwen2", _qwen2, "AutoModelForCausalLM"),
    "tiny-llama3": ("llama3", _llama3, "AutoModelForCausalLM"),
    "tiny-qwen3": ("qwen3", _qwen3, "AutoModelForCausalLM"),
}


def _builder(name: str) -> tuple[str, Callable, str]:
    try:
        return TINY_BUILDERS[name]
    except KeyError:
        raise CorlError(f"unknown tiny model '{name}'; tiny models: {', '.join(TINY_BUILDERS)}") from None


def make_tiny(name: str, *, seed: int = 0) -> tuple[Any, Any]:
    """The tiny model ``name`` in memory (fp32, eval mode) and its processor (VLMs) or tokenizer (text models).

    Weights come from ``torch.manual_seed(seed)`` on CPU, so the same seed gives identical weights on any machine
    with the same torch version; the caller's RNG state is left untouched.
    """
    family, recipe, auto_class = _builder(name)
    # One build at a time per process: threads would otherwise interleave draws from torch's one global generator
    # (weights depending on timing), and a first `import transformers` racing in two threads can hand one of them
    # the module before it swaps itself for its lazy loader (then `transformers.AutoModel…` is missing).
    with _BUILD_LOCK:
        import torch
        import transformers

        tok = build_tokenizer(family)
        config, processor = recipe(tok)
        config.dtype = torch.float32
        with torch.random.fork_rng(devices=[]):  # seeded without disturbing the caller's RNG
            torch.manual_seed(seed)
            model = getattr(transformers, auto_class).from_config(config, dtype=torch.float32)
            _post_init(name, model)
        model.eval()
        model.generation_config = _generation_config(tok, family, config)
        return model, (tok if processor is None else processor())


def build_tiny(name: str, out_dir: str | Path, *, seed: int = 0) -> Path:
    """Write the tiny checkpoint ``name`` as a Hugging Face folder into ``out_dir`` (created if missing)."""
    model, processor = make_tiny(name, seed=seed)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    processor.save_pretrained(out)
    _fix_saved_layout(name, out)
    from .vllm_layout import apply_to_folder  # the zoo's folders are in the hub layout, as vLLM loads them

    apply_to_folder(out)
    return out


def _post_init(name: str, model) -> None:
    """Family fixes after random init (inside the seeded block, so still deterministic)."""
    import torch

    if name == "tiny-gemma3":
        # Gemma-3 zero-initialises the projection from vision to text: vision gradients would be exactly 0.
        weight = model.model.multi_modal_projector.mm_input_projection_weight
        with torch.no_grad():
            weight.normal_(0.0, weight.shape[0] ** -0.5)


def _generation_config(tok, family: str, config):
    from transformers import GenerationConfig

    spec = SPECS[family]
    text = getattr(config, "text_config", config)
    return GenerationConfig(
        bos_token_id=text.bos_token_id,
        eos_token_id=token_ids(tok, spec.generation_eos),
        pad_token_id=text.pad_token_id,
    )


def _fix_saved_layout(name: str, out: Path) -> None:
    """Rename Gemma-3's saved vision weights to the hub layout ``vision_tower.vision_model.*`` that vLLM expects.

    transformers 5.19 saves ``vision_tower.*`` (no ``vision_model``); its loader accepts the hub layout too, so HF
    loading is unchanged (the reload test compares logits).
    """
    if name != "tiny-gemma3":
        return
    from safetensors.torch import load_file, save_file

    path = out / "model.safetensors"
    tensors = load_file(path)
    renamed = {_gemma_hub_key(k): v for k, v in tensors.items()}
    save_file(dict(sorted(renamed.items())), path, metadata={"format": "pt"})


def _gemma_hub_key(key: str) -> str:
    if key.startswith("vision_tower.") and not key.startswith("vision_tower.vision_model."):
        return "vision_tower.vision_model." + key[len("vision_tower.") :]
    return key


def ensure_tiny(name: str, *, seed: int = 0) -> Path:
    """The cached tiny checkpoint ``name`` for ``seed``, built on first use.

    Built into a temporary folder next to the target and renamed into place, so a reader never sees a half-written
    checkpoint and two processes racing both end up with one complete folder (the loser discards its copy).
    """
    _builder(name)
    root = cache_dir() / "tiny"
    target = root / f"{name}-seed{seed}-v{VERSION}"
    if (target / "config.json").exists():
        return target
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=root))
    try:
        build_tiny(name, tmp, seed=seed)
        try:
            os.rename(tmp, target)  # atomic; fails if another process finished first
        except OSError:
            if not (target / "config.json").exists():
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return target
