"""Full-size random models of the real presets, built from the published configs each family writes down
(``model_adapters/<family>/full_size.py``, a :class:`~model_adapters.full_size_configs.FullSizeSpec` per preset).

Why: memory is the thing real scale gets wrong, and it is set by the architecture, not by the trained weights. A
``NAME@random`` preset is the published architecture (``NAME``'s widths, depths, vocabulary, vision tower and
image processor) with random weights, so a lent GPU can run the real pair without downloading anything.
``NAME@width-only`` keeps every width (hidden size, vocabulary, vision width, image processor) with
:data:`~model_adapters.full_size_configs.WIDTH_ONLY_LAYERS` text layers and one vision layer, so a CPU can measure
real-width memory (embeddings, LM head, logprob tail, one layer's activations).

The checkpoint folder holds config, tokenizer, processor and generation config but no weights (a 3 B model is
15 GB of fp32): :meth:`model_adapters.base.ModelAdapter.load_model` sees the marker file
:data:`~model_adapters.random_init.RANDOM_MARKER` and
builds the weights on the target device from the config, seeded. Tokenizer and chat template are the tiny zoo's
of the same family; their ids all fall inside the real vocabulary.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from corl_vl.errors import CorlError
from corl_vl.paths import cache_dir

from .full_size_configs import WIDTH_ONLY_LAYERS, WIDTH_ONLY_VISION_LAYERS
from .presets import VARIANTS, full_size_specs
from .random_init import RANDOM_MARKER
from .tiny import generation_config
from .tiny_tokenizer import build_tokenizer

VERSION = 1  # bump when a recipe here or in a family's full_size.py changes: cached folders are keyed by it


def split_name(preset: str) -> tuple[str, str]:
    """``"qwen2.5-vl-3b@width-only"`` → ``("qwen2.5-vl-3b", "width-only")``; unknown names are one error."""
    base, _, variant = preset.partition("@")
    published = full_size_specs()
    if base not in published or variant not in VARIANTS:
        known = ", ".join(f"{b}@{v}" for b in published for v in VARIANTS)
        raise CorlError(f"unknown full-size preset '{preset}'; known: {known}")
    return base, variant


def make_config(preset: str) -> tuple[Any, Any, Any, str]:
    """``(config, tokenizer, processor or tokenizer, auto class name)`` of a full-size preset; builds no weights."""
    base, variant = split_name(preset)
    spec = full_size_specs()[base]
    tok = build_tokenizer(spec.tiny.tokenizer)
    tiny_config, tiny_processor = spec.tiny.build(tok)
    raw = tiny_config.to_dict()
    text = raw.get("text_config", raw)
    text.pop("layer_types", None)  # derived again from the real depth (sliding/full pattern)
    text.update(spec.text)
    if variant == "width-only":
        text["num_hidden_layers"] = WIDTH_ONLY_LAYERS
    if spec.vision:
        vision = raw["vision_config"]
        vision.update(spec.vision)
        if variant == "width-only":
            depth_key = "depth" if "depth" in vision else "num_hidden_layers"
            vision[depth_key] = WIDTH_ONLY_VISION_LAYERS
            if "fullatt_block_indexes" in vision:
                vision["fullatt_block_indexes"] = [WIDTH_ONLY_VISION_LAYERS - 1]
        raw.update(spec.top)
        for key in ("vocab_size", "tie_word_embeddings"):  # vLLM and older readers look at the top level too
            raw[key] = text[key]
    config = type(tiny_config).from_dict(raw)
    if tiny_processor is not None and spec.processor is None:
        raise CorlError(f"full-size preset '{preset}': its family gives no full-size processor recipe")
    processor = tok if spec.processor is None else spec.processor(spec, tok)
    return config, tok, processor, spec.tiny.auto_class


def parameter_count(preset: str) -> int:
    """Parameters of a full-size preset, counted on the meta device (no memory is allocated)."""
    # lazy: torch, transformers
    import torch  # heavy: only when counting
    import transformers  # lazy: transformers

    config, _, _, auto_class = make_config(preset)
    with torch.device("meta"):
        model = getattr(transformers, auto_class).from_config(config)
    return sum(p.numel() for p in model.parameters())


def ensure_full_size(preset: str, *, seed: int = 0) -> Path:
    """The cached folder of a full-size preset (config, tokenizer, processor, marker; no weights), built once."""
    base, variant = split_name(preset)
    target = cache_dir() / "full_size" / f"{base}@{variant}-seed{seed}-v{VERSION}"
    if (target / RANDOM_MARKER).exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        config, tok, processor, auto_class = make_config(preset)
        spec = full_size_specs()[base]
        config.architectures = [_architecture(auto_class, config)]
        config.save_pretrained(tmp)
        processor.save_pretrained(tmp)
        generation_config(tok, spec.tiny.tokenizer, config).save_pretrained(tmp)
        marker = {
            "preset": preset,
            "seed": seed,
            "tiny_recipe": spec.tiny.name,
            "auto_class": auto_class,
        }
        (tmp / RANDOM_MARKER).write_text(json.dumps(marker, indent=1) + "\n")
        try:
            os.rename(tmp, target)  # atomic; fails if another process finished first
        except OSError:
            if not (target / RANDOM_MARKER).exists():
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return target


def _architecture(auto_class: str, config: Any) -> str:
    import transformers  # lazy: transformers (only when a folder is written)

    mapping = getattr(transformers, auto_class)._model_mapping
    return mapping[type(config)].__name__
