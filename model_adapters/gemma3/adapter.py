"""Gemma-3 (``Gemma3ForConditionalGeneration`` + ``Gemma3Processor``): the family with the most traps.

Family quirks handled here (docs/reference.md#model-families):
- ``token_type_ids`` (1 on image soft tokens) on every forward: image tokens attend bidirectionally;
- one prompt per processor call, images nested per sample (``[[img]]``), padding done by the base class, so the
  ragged ``token_type_ids`` crash of unpadded processor batches cannot happen;
- generation also stops at ``<end_of_turn>``;
- its chat template emits ``<bos>``: templated text is tokenised without special tokens (base class), and vLLM
  gets token ids, so no double BOS;
- rollout/trainer drift is large (vLLM's CPU attention is causal over image tokens; docs/reference.md):
  token-level importance-ratio truncation is on by default and NaN rollout logprobs are contained;
- under ZeRO-3 the embedding's ``padding_idx`` row is zeroed on a zero-size shard → guarded at init;
- detokenisation can leak SentencePiece "▁" (base ``decode`` maps it to a space).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from model_adapters.base import ModelAdapter, PromptInputs
from model_adapters.registry import register_adapter
from model_adapters.tiny import ensure_tiny

from .tiny import TINY, init_projection

if TYPE_CHECKING:
    import torch


@contextlib.contextmanager
def zero_size_embedding_guard() -> Iterator[None]:
    """While active, initialising a Gemma-3 ``nn.Embedding`` whose weight is a zero-size shard (ZeRO-3
    partitioned) skips the ``padding_idx`` row zeroing that would index an empty tensor; all else is unchanged.

    Patches the class method for the duration (not thread-safe; model construction is single-threaded).
    """
    # lazy: torch, transformers
    from torch import nn  # heavy: only while weights are created
    from transformers.models.gemma3 import modeling_gemma3  # lazy: transformers

    cls = modeling_gemma3.Gemma3PreTrainedModel
    original = cls._init_weights

    def guarded(self: Any, module: Any) -> None:
        if isinstance(module, nn.Embedding) and module.weight.numel() == 0 and module.padding_idx is not None:
            padding_idx, module.padding_idx = module.padding_idx, None
            try:
                original(self, module)
            finally:
                module.padding_idx = padding_idx
            return
        original(self, module)

    cls._init_weights = guarded
    try:
        yield
    finally:
        cls._init_weights = original


@register_adapter("gemma3")
class Gemma3Adapter(ModelAdapter):
    """Gemma-3 instruct; family option ``do_pan_and_scan`` (default False: one 896² crop per image)."""

    model_types = ("gemma3",)
    image_token = "<image_soft_token>"
    template_image_placeholder = "<start_of_image>"  # the template's per-image mark; the processor expands it
    contain_nonfinite_rollout_logprobs = True

    def configure(self, *, do_pan_and_scan: bool = False, **family_kwargs: Any) -> None:
        super().configure(**family_kwargs)
        self.do_pan_and_scan = bool(do_pan_and_scan)

    vision_module_prefixes = ("model.vision_tower.", "model.multi_modal_projector.")
    vision_tower_prefixes = ("model.vision_tower.",)
    projector_prefixes = ("model.multi_modal_projector.",)

    def image_token_counts(self, width: int, height: int, config: Any) -> tuple[int, int]:
        size = self.processor.image_processor.size
        side = int(size["height"])
        patch = int(config.vision_config.patch_size)
        # one crop (pan-and-scan off); the soft tokens plus "\n\n<start_of_image>" … "<end_of_image>\n\n"
        return int(self.processor.image_seq_length) + 4, (side // patch) ** 2

    def image_feature_units(self, prompt: PromptInputs) -> int:
        return int(
            prompt.mm_inputs["pixel_values"].shape[0]
        )  # one entry per image (pan-and-scan crops included)

    def processor_kwargs(self) -> dict[str, Any]:
        return {"do_pan_and_scan": self.do_pan_and_scan}

    def extra_stop_ids(self) -> list[int]:
        end_of_turn = self.tokenizer.convert_tokens_to_ids("<end_of_turn>")
        return [] if end_of_turn is None or end_of_turn == self.tokenizer.unk_token_id else [int(end_of_turn)]

    def token_type_fields(self, input_ids: torch.Tensor) -> dict[str, torch.Tensor]:
        image_id = self.tokenizer.convert_tokens_to_ids(self.image_token)
        return {"token_type_ids": (input_ids == image_id).long()}

    def zero3_init_guard(self) -> contextlib.AbstractContextManager[None]:
        return zero_size_embedding_guard()

    def init_random_weights(self, model: Any) -> None:
        init_projection(model)

    @classmethod
    def tiny_checkpoint(cls, seed: int = 0) -> Path:
        return ensure_tiny(TINY, seed=seed)
