"""SmolVLM (``SmolVLMForConditionalGeneration`` + ``SmolVLMProcessor``; Idefics3 lineage) for corl-vl.

Family quirks handled here:
- the processor splits a large image into a grid of crops plus a global view; the image tensors of one prompt
  are ``[1, crops, 3, H, W]`` (``pixel_attention_mask`` ``[1, crops, H, W]``), so prompts with different crop
  counts cannot be stacked along the batch. The model flattens ``batch × crops`` anyway and drops all-zero
  padding crops, so :meth:`SmolVLMAdapter.collate_mm` lays every prompt's crops out along dim 0 instead;
- the chat template writes ``<image>`` once per image part and the processor expands it (row/column markers,
  64 ``<image>`` tokens per crop at full size); vLLM gets the unexpanded ids plus the images and the same
  ``do_image_splitting`` choice, so both build the same prompt;
- a turn ends with ``<end_of_utterance>``; the template opens with the tokenizer's BOS ``<|im_start|>``, so the
  base class tokenises it without adding a second one;
- positions are plain 1-D: no per-token fields on the forward;
- a problem's K rows share one encoding of its crops per micro-batch (:meth:`SmolVLMAdapter.image_feature_units`,
  the opt-in of corl-vl's one vision pass per problem).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from corl_vl.errors import CorlError
from model_adapters.base import ModelAdapter, PromptInputs

if TYPE_CHECKING:
    from pathlib import Path

    import torch

END_OF_UTTERANCE = "<end_of_utterance>"


class SmolVLMAdapter(ModelAdapter):
    """SmolVLM2 instruct; family option ``do_image_splitting`` (default: the checkpoint's processor setting)."""

    model_types = ("smolvlm",)
    image_token = "<image>"
    vision_tower_prefixes = ("model.vision_model.",)  # train.freeze's part names
    projector_prefixes = ("model.connector.",)

    def configure(self, *, do_image_splitting: bool | None = None, **family_kwargs: Any) -> None:
        super().configure(**family_kwargs)
        if do_image_splitting is not None and not isinstance(do_image_splitting, bool):
            raise CorlError(f"adapter {self.name}: do_image_splitting must be true or false")
        self.do_image_splitting = do_image_splitting

    def processor_kwargs(self) -> dict[str, Any]:
        return {} if self.do_image_splitting is None else {"do_image_splitting": self.do_image_splitting}

    def extra_stop_ids(self) -> list[int]:
        token_id = self.tokenizer.convert_tokens_to_ids(END_OF_UTTERANCE)
        return [] if token_id is None or token_id == self.tokenizer.unk_token_id else [int(token_id)]

    def collate_mm(self, prompts: Sequence[PromptInputs]) -> dict[str, torch.Tensor]:
        import torch

        keys: list[str] = []
        for p in prompts:
            keys += [k for k in p.mm_inputs if k not in keys]
        # [1, crops, ...] per prompt → [crops, 1, ...]: one crop per image slot, so nothing needs padding
        return {
            k: torch.cat(
                [
                    p.mm_inputs[k].reshape(-1, 1, *p.mm_inputs[k].shape[2:])
                    for p in prompts
                    if k in p.mm_inputs
                ]
            )
            for k in keys
        }

    def image_feature_units(self, prompt: PromptInputs) -> int:
        # one vision pass per problem: the model encodes one entry per crop that is not all zeros (padding)
        pixels = prompt.mm_inputs["pixel_values"]
        return int(pixels.flatten(2).ne(0).any(-1).sum())

    @classmethod
    def tiny_checkpoint(cls, seed: int = 0) -> Path:
        from .tiny import ensure_tiny_smolvlm

        return ensure_tiny_smolvlm(seed=seed)
