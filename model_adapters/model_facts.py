"""What a memory plan needs to know about one model, read from its config without loading weights: the adapter's
side (:class:`MemoryFacts`, mixed into every adapter) and the sizes it returns (:class:`ModelFacts`).

Why here: the sizes are family facts (which config keys hold the widths, how many tokens an image becomes), and
family facts live in ``model_adapters/``. Parameter counts come from building the architecture on the meta device
(exact, no memory). A preset name becomes facts in :func:`model_adapters.memory_facts.memory_facts`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from .scoring import LogprobScoring  # image_feature_units' default: whether a family opted in

REFERENCE_IMAGE = (1024, 768)  # the plan's image: the adapters' default long-side cap, 4:3


@dataclass(frozen=True)
class ModelFacts:
    """Sizes of one model (text decoder, vision tower, images) for memory arithmetic."""

    parameters: int
    vision_parameters: int  # vision tower + projector (what freezing the vision tower leaves untrained)
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    vision_hidden: int = 0
    vision_layers: int = 0
    vision_intermediate: int = 0
    image_tokens: int = 0  # tokens one reference image adds to the language model's sequence
    vision_tokens: int = 0  # the vision tower's sequence length for that image (before merging/pooling)
    zero3_sync_whole: bool = False  # the ZeRO-3 weight sync gathers the whole model (MemoryFacts hook)
    shared_vision_pass: bool = (
        False  # a problem's rows share one encoding of its picture (image_feature_units)
    )


def facts_from_config(
    config: Any, parameters: int, vision_parameters: int, image: tuple[int, int]
) -> ModelFacts:
    """The text decoder's and vision tower's sizes from a (composite) HF config; image counts are the adapter's."""
    text = config.get_text_config()
    vision = getattr(config, "vision_config", None)
    heads = int(text.num_attention_heads)
    return ModelFacts(
        parameters=parameters,
        vision_parameters=vision_parameters,
        hidden=int(text.hidden_size),
        layers=int(text.num_hidden_layers),
        heads=heads,
        kv_heads=int(text.num_key_value_heads),
        head_dim=int(getattr(text, "head_dim", None) or text.hidden_size // heads),
        intermediate=int(text.intermediate_size),
        vocab=int(text.vocab_size),
        vision_hidden=int(getattr(vision, "hidden_size", 0) or 0),
        vision_layers=int(getattr(vision, "depth", None) or getattr(vision, "num_hidden_layers", 0) or 0),
        vision_intermediate=int(getattr(vision, "intermediate_size", 0) or 0),
    )


def count_on_meta(auto_class: str, config: Any, vision_prefixes: tuple[str, ...]) -> tuple[int, int]:
    """(all parameters, those under ``vision_prefixes``) of the architecture, built on the meta device."""
    # lazy: torch, transformers
    import torch  # heavy: only when parameters are counted
    import transformers  # lazy: transformers

    with torch.device("meta"):
        model = getattr(transformers, auto_class).from_config(config)
    total = vision = 0
    for name, param in model.named_parameters():
        total += param.numel()
        if name.startswith(vision_prefixes):
            vision += param.numel()
    return total, vision


class MemoryFacts:
    """Mixed into :class:`~model_adapters.base.ModelAdapter`: the adapter's side of memory planning."""

    # parameter-name prefixes of the vision tower and projector (family hook; empty for text models)
    vision_module_prefixes: tuple[str, ...] = ()
    # family hook: True where transformers converts a weight on save (a converter, not a renaming), so the
    # ZeRO-3 vLLM sync cannot stream it one parameter at a time (corl_vl.rollout.vllm_sync)
    zero3_sync_whole: bool = False

    def image_token_counts(self, width: int, height: int, config: Any) -> tuple[int, int]:
        """Family hook: (tokens one ``width × height`` image adds to the language model's sequence, the vision
        tower's sequence length for it), from the processor's settings and the model ``config``. Text: (0, 0)."""
        return 0, 0

    def memory_facts(self, image: tuple[int, int] = REFERENCE_IMAGE) -> ModelFacts:
        """This model's :class:`ModelFacts` (config read, architecture counted on the meta device)."""
        from transformers import AutoConfig  # lazy: transformers (only when a plan is made)

        config = AutoConfig.from_pretrained(self.model_path, trust_remote_code=self.trust_remote_code)
        total, vision = count_on_meta(self.auto_model_class, config, self.vision_module_prefixes)
        facts = dataclasses.replace(
            facts_from_config(config, total, vision, image), zero3_sync_whole=self.zero3_sync_whole
        )
        if not self.supports_images:
            return facts
        llm, tower = self.image_token_counts(*image, config)
        shared = getattr(self, "share_vision_pass", False) and _opted_in(type(self))
        return dataclasses.replace(facts, image_tokens=llm, vision_tokens=tower, shared_vision_pass=shared)


def _opted_in(cls: type) -> bool:
    """Whether the family gives ``image_feature_units`` (the base's answers None: per-row encoding)."""
    return getattr(cls, "image_feature_units", None) is not LogprobScoring.image_feature_units
