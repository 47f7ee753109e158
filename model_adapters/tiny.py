"""Tiny randomly initialised checkpoints of the real architectures (the test suite's and CPU demo's models).

The shared machinery; each family's recipe lives in its folder (``model_adapters/<family>/tiny.py``, a
:class:`TinyRecipe` its presets name). There is no model hub here and real checkpoints are gigabytes, yet adapters, rollout engines (HF and vLLM) and the
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
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from corl_vl.errors import CorlError
from corl_vl.paths import cache_dir

from .presets import all_presets
from .tiny_tokenizer import TokenizerSpec, build_tokenizer, token_ids
from .vllm_layout import apply_to_folder

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


def text_common(tok: Any, spec: TokenizerSpec) -> dict[str, Any]:
    """Vocabulary size and the explicit bos/eos/pad ids every text config gets."""
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


@dataclass(frozen=True)
class TinyRecipe:
    """How to build one tiny checkpoint of a family (declared in ``model_adapters/<family>/tiny.py``)."""

    name: str  # the preset name, e.g. "tiny-qwen2.5-vl" (also the cache folder's stem)
    tokenizer: TokenizerSpec  # the family's own (declared beside the recipe; tiny_tokenizer builds it)
    build: Callable[[Any], tuple[Any, Callable[[], Any] | None]]  # tok → (config, processor factory or None)
    auto_class: str = "AutoModelForImageTextToText"
    post_init: Callable[[Any], None] | None = None  # family fix after random init (inside the seeded block)
    fix_saved: Callable[[Path], None] | None = None  # rename saved tensors into the hub layout
    vllm_weights: Callable[[str, Any], Iterable[tuple[str, Any]]] | None = None  # the family's vLLM layout


def tiny_recipes() -> dict[str, TinyRecipe]:
    """Every built-in tiny recipe by name (from the families' presets)."""
    return {p.name: p.tiny for p in all_presets().values() if p.tiny is not None}


def video_processor(class_name: str) -> Any:
    """The family's video processor (its Processor class refuses to build without one; needs torchvision)."""
    import transformers  # lazy: transformers (only when a processor is built)

    return getattr(transformers, class_name)()


def _recipe(name: str | TinyRecipe) -> TinyRecipe:
    if isinstance(name, TinyRecipe):
        return name
    recipes = tiny_recipes()
    try:
        return recipes[name]
    except KeyError:
        raise CorlError(f"unknown tiny model '{name}'; tiny models: {', '.join(recipes)}") from None


def make_tiny(name: str | TinyRecipe, *, seed: int = 0) -> tuple[Any, Any]:
    """The tiny model ``name`` in memory (fp32, eval mode) and its processor (VLMs) or tokenizer (text models).

    Weights come from ``torch.manual_seed(seed)`` on CPU, so the same seed gives identical weights on any machine
    with the same torch version; the caller's RNG state is left untouched.
    """
    recipe = _recipe(name)
    # One build at a time per process: threads would otherwise interleave draws from torch's one global generator
    # (weights depending on timing), and a first `import transformers` racing in two threads can hand one of them
    # the module before it swaps itself for its lazy loader (then `transformers.AutoModel…` is missing).
    with _BUILD_LOCK:
        # lazy: torch, transformers
        import torch  # heavy: a tiny model is built only when asked for
        import transformers  # lazy: transformers

        tok = build_tokenizer(recipe.tokenizer)
        config, processor = recipe.build(tok)
        config.dtype = torch.float32
        with torch.random.fork_rng(devices=[]):  # seeded without disturbing the caller's RNG
            torch.manual_seed(seed)
            model = getattr(transformers, recipe.auto_class).from_config(config, dtype=torch.float32)
            if recipe.post_init is not None:
                recipe.post_init(model)
        model.eval()
        model.generation_config = generation_config(tok, recipe.tokenizer, config)
        return model, (tok if processor is None else processor())


def build_tiny(name: str | TinyRecipe, out_dir: str | Path, *, seed: int = 0) -> Path:
    """Write the tiny checkpoint ``name`` as a Hugging Face folder into ``out_dir`` (created if missing)."""
    recipe = _recipe(name)
    model, processor = make_tiny(recipe, seed=seed)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    processor.save_pretrained(out)
    if recipe.fix_saved is not None:
        recipe.fix_saved(out)
    if recipe.vllm_weights is not None:  # the zoo's folders are in the hub layout, as vLLM loads them
        apply_to_folder(out, recipe.vllm_weights)
    return out


def generation_config(tok: Any, spec: TokenizerSpec, config: Any) -> Any:
    """The generation config of a zoo (or full-size) folder: the family's stop tokens, the config's bos/pad."""
    from transformers import GenerationConfig  # lazy: transformers (only when a folder is written)

    text = getattr(config, "text_config", config)
    return GenerationConfig(
        bos_token_id=text.bos_token_id,
        eos_token_id=token_ids(tok, spec.generation_eos),
        pad_token_id=text.pad_token_id,
    )


def ensure_tiny(name: str | TinyRecipe, *, seed: int = 0) -> Path:
    """The cached tiny checkpoint ``name`` for ``seed``, built on first use.

    Built into a temporary folder next to the target and renamed into place, so a reader never sees a half-written
    checkpoint and two processes racing both end up with one complete folder (the loser discards its copy).
    """
    recipe = _recipe(name)
    root = cache_dir() / "tiny"
    target = root / f"{recipe.name}-seed{seed}-v{VERSION}"
    if (target / "config.json").exists():
        return target
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=root))
    try:
        build_tiny(recipe, tmp, seed=seed)
        try:
            os.rename(tmp, target)  # atomic; fails if another process finished first
        except OSError:
            if not (target / "config.json").exists():
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return target
