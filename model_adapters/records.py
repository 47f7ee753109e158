"""What an adapter hands the trainer and the engines: an encoded prompt, a collated training batch, and the
per-token logprobs of completions. Plain records, no family logic (:mod:`model_adapters.base` fills them)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # heavy imports stay lazy: `corl-vl --help` must not import torch
    import torch
    from PIL import Image

    from .vision_sharing import SharedImages


@dataclass
class PromptInputs:
    """One encoded prompt: exactly what the model sees before the completion.

    Attributes:
        problem_id: the problem's id (answers travel keyed by it).
        prompt_ids: the *expanded* prompt token ids (image placeholders already repeated per image token).
        mm_inputs: this prompt's image tensors (``pixel_values``, ``image_grid_thw``, …), first dim = images or
            patches of this prompt only, so a batch is their concatenation; empty for text-only prompts.
        prompt_text: the chat-templated prompt string (logging, debugging).
        request_ids: the same prompt *unexpanded* (one placeholder per image), tokenised from the same rendering;
            what engines that expand placeholders themselves (vLLM) are given.
        images: the prepared images (RGB, resized) the image tensors were computed from, in prompt order.
    """

    problem_id: str
    prompt_ids: list[int]
    mm_inputs: dict[str, torch.Tensor] = field(default_factory=dict)
    prompt_text: str = ""
    request_ids: list[int] = field(default_factory=list)
    images: list[Image.Image] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.prompt_ids)


@dataclass
class TrainingBatch:
    """Prompt + completion rows collated for one forward pass (right-padded).

    Attributes:
        inputs: keyword arguments for ``model(**inputs)`` (ids, mask, image tensors, family fields).
        completion_mask: ``[B, Tc]`` bool, True on real completion tokens.
        completion_ids: ``[B, Tc]`` long, completion tokens right-padded with the pad id.
        prompt_lengths: ``[B]`` long, unpadded prompt length of each row (its completion starts there).
        shared_images: how rows share one encoding of their images (``inputs`` then holds the tower's inputs
            once per distinct prompt; :mod:`model_adapters.vision_sharing`); None: every row's own.
        images_encoded: the images the vision tower encodes in this batch's forward.
    """

    inputs: dict[str, torch.Tensor]
    completion_mask: torch.Tensor
    completion_ids: torch.Tensor
    prompt_lengths: torch.Tensor
    shared_images: SharedImages | None = None
    images_encoded: int = 0


@dataclass
class CompletionLogprobs:
    """Per-token logprobs of completion tokens (``[B, Tc]``, 0 where masked), the mask, and — when asked with
    ``with_entropy`` — each token distribution's entropy and self-certainty (``logsumexp(z) − mean_v z`` of the
    temperature-scaled logits, Intuitor's signal), computed from the same logits so no second forward is needed.
    """

    logprobs: torch.Tensor
    mask: torch.Tensor
    entropy: torch.Tensor | None = None
    self_certainty: torch.Tensor | None = None
