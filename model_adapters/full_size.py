"""Full-size random models of the real presets, built from the configs in :mod:`model_adapters.full_size_configs`.

Why: memory is the thing real scale gets wrong, and it is set by the architecture, not by the trained weights. A
``NAME@random`` preset is the published architecture (``NAME``'s widths, depths, vocabulary, vision tower and
image processor) with random weights, so a lent GPU can run the real pair without downloading anything.
``NAME@width-only`` keeps every width (hidden size, vocabulary, vision width, image processor) with
:data:`~model_adapters.full_size_configs.WIDTH_ONLY_LAYERS` text layers and one vision layer, so a CPU can measure
real-width memory (embeddings, LM head, logprob tail, one layer's activations).

The checkpoint folder holds config, tokenizer, processor and generation config but no weights (a 3 B model is
15 GB of fp32): :meth:`model_adapters.base.ModelAdapter.load_model` sees the marker file :data:`RANDOM_MARKER` and
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

from .full_size_configs import FULL_SIZE, WIDTH_ONLY_LAYERS, WIDTH_ONLY_VISION_LAYERS, FullSizeSpec

VERSION = 1  # bump when a recipe here or in full_size_configs changes: cached folders are keyed by it
RANDOM_MARKER = "corl_random_init.json"  # in a checkpoint folder: weights are built from config, not loaded
VARIANTS = ("random", "width-only")


def split_name(preset: str) -> tuple[str, str]:
    """``"qwen2.5-vl-3b@width-only"`` → ``("qwen2.5-vl-3b", "width-only")``; unknown names are one error."""
    base, _, variant = preset.partition("@")
    if base not in FULL_SIZE or variant not in VARIANTS:
        known = ", ".join(f"{b}@{v}" for b in FULL_SIZE for v in VARIANTS)
        raise CorlError(f"unknown full-size preset '{preset}'; known: {known}")
    return base, variant


def spec_of(preset: str) -> FullSizeSpec:
    return FULL_SIZE[split_name(preset)[0]]


def make_config(preset: str) -> tuple[Any, Any, Any, str]:
    """``(config, tokenizer, processor or tokenizer, auto class name)`` of a full-size preset; builds no weights."""
    from .tiny import TINY_BUILDERS
    from .tiny_tokenizer import build_tokenizer

    base, variant = split_name(preset)
    spec = FULL_SIZE[base]
    family, recipe, auto_class = TINY_BUILDERS[spec.tiny]
    tok = build_tokenizer(family)
    tiny_config, tiny_processor = recipe(tok)
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
    processor = tok if tiny_processor is None else _processor(spec, tok)
    return config, tok, processor, auto_class


def _processor(spec: FullSizeSpec, tok: Any) -> Any:
    """The family's processor with the published image settings (the tiny zoo's uses tiny images)."""
    import transformers

    from .tiny import _video

    if spec.tiny == "tiny-qwen2.5-vl":
        size = {"shortest_edge": spec.image["min_pixels"], "longest_edge": spec.image["max_pixels"]}
        return transformers.Qwen2_5_VLProcessor(
            image_processor=transformers.Qwen2VLImageProcessor(size=size),
            tokenizer=tok,
            chat_template=tok.chat_template,
            video_processor=_video("Qwen2VLVideoProcessor"),
        )
    if spec.tiny == "tiny-internvl3.5":
        tok.init_kwargs["crop_to_patches"] = False  # one tile, as the tiny zoo and the paper run it
        tile = spec.image["tile"]
        image_processor = transformers.GotOcr2ImageProcessor(
            size={"height": tile, "width": tile}, crop_to_patches=False, min_patches=1, max_patches=12
        )
        return transformers.InternVLProcessor(
            image_processor=image_processor,
            tokenizer=tok,
            chat_template=tok.chat_template,
            video_processor=_video("InternVLVideoProcessor"),
            image_seq_length=spec.image["tokens_per_tile"],
        )
    if spec.tiny == "tiny-gemma3":
        side = spec.image["size"]
        image_processor = transformers.Gemma3ImageProcessor(
            size={"height": side, "width": side}, do_pan_and_scan=False
        )
        return transformers.Gemma3Processor(
            image_processor=image_processor,
            tokenizer=tok,
            chat_template=tok.chat_template,
            image_seq_length=spec.image["tokens"],
        )
    raise CorlError(f"no full-size processor recipe for the family of {spec.tiny}")


def parameter_count(preset: str) -> int:
    """Parameters of a full-size preset, counted on the meta device (no memory is allocated)."""
    import torch
    import transformers

    config, _, _, auto_class = make_config(preset)
    with torch.device("meta"):
        model = getattr(transformers, auto_class).from_config(config)
    return sum(p.numel() for p in model.parameters())


def ensure_full_size(preset: str, *, seed: int = 0) -> Path:
    """The cached folder of a full-size preset (config, tokenizer, processor, marker; no weights), built once."""
    from .tiny import _generation_config

    base, variant = split_name(preset)
    target = cache_dir() / "full_size" / f"{base}@{variant}-seed{seed}-v{VERSION}"
    if (target / RANDOM_MARKER).exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        config, tok, processor, auto_class = make_config(preset)
        family = _family(FULL_SIZE[base].tiny)
        config.architectures = [_architecture(auto_class, config)]
        config.save_pretrained(tmp)
        processor.save_pretrained(tmp)
        _generation_config(tok, family, config).save_pretrained(tmp)
        marker = {
            "preset": preset,
            "seed": seed,
            "tiny_recipe": FULL_SIZE[base].tiny,
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


def _family(tiny_name: str) -> str:
    from .tiny import TINY_BUILDERS

    return TINY_BUILDERS[tiny_name][0]


def _architecture(auto_class: str, config: Any) -> str:
    import transformers

    mapping = getattr(transformers, auto_class)._model_mapping
    return mapping[type(config)].__name__


def random_init_record(model_path: str | Path) -> dict[str, Any] | None:
    """The marker of a random full-size folder, or None for a real checkpoint."""
    marker = Path(model_path) / RANDOM_MARKER
    if not marker.is_file():
        return None
    return json.loads(marker.read_text())


def build_random_model(auto: Any, model_path: str | Path, *, dtype: Any, device: str, **kwargs: Any) -> Any:
    """Random weights of the folder's architecture, created directly on ``device`` in ``dtype`` (seeded)."""
    import torch
    from transformers import AutoConfig

    from .tiny import _post_init

    record = random_init_record(model_path) or {}
    config = AutoConfig.from_pretrained(model_path)
    with torch.random.fork_rng(devices=[]), torch.device(device):
        torch.manual_seed(int(record.get("seed", 0)))
        model = auto.from_config(config, dtype=dtype, **kwargs)
        _post_init(str(record.get("tiny_recipe", "")), model)
    return model
