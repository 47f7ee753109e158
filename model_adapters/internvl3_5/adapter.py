"""InternVL3.5 in the Hugging Face format (``InternVLForConditionalGeneration`` + ``InternVLProcessor``).

Family quirks handled here:
- one 448² tile per image by default (``crop_to_patches=False``, 256 image tokens), as in the paper; tiling
  (up to ``max_patches`` tiles plus a thumbnail) is a family option. Tiling multiplies image tokens ~13× — an
  explicit choice, never a silent default;
- the same processor options go to vLLM (``mm_processor_kwargs``) so both paths build the same tokens;
- HF conversions have shipped templates writing ``<image>`` (older) or ``<IMG_CONTEXT>`` (newer) per image part,
  while the processor only expands ``<IMG_CONTEXT>``: with ``<image>`` the prompt would hold the literal text
  and no image tokens. The template is normalised to the processor's spelling before any rendering.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from corl_vl.errors import CorlError
from model_adapters.base import ModelAdapter, PromptInputs
from model_adapters.registry import register_adapter
from model_adapters.tiny import ensure_tiny

from .tiny import TINY

LEGACY_IMAGE_PLACEHOLDER = "<image>"  # older InternVL HF templates; the processor expands <IMG_CONTEXT>


@register_adapter("internvl3_5")
class InternVL35Adapter(ModelAdapter):
    """InternVL3.5-HF; family options ``crop_to_patches`` (default False), ``min_patches``, ``max_patches``."""

    model_types = ("internvl",)
    image_token = "<IMG_CONTEXT>"

    @classmethod
    def tiny_checkpoint(cls, seed: int = 0) -> Path:
        return ensure_tiny(TINY, seed=seed)

    def configure(
        self,
        *,
        crop_to_patches: bool = False,
        min_patches: int | None = None,
        max_patches: int | None = None,
        **family_kwargs: Any,
    ) -> None:
        super().configure(**family_kwargs)
        for key, value in (("min_patches", min_patches), ("max_patches", max_patches)):
            if value is not None and (not isinstance(value, int) or value < 1):
                raise CorlError(f"adapter {self.name}: {key} must be a positive integer, got {value!r}")
        self.crop_to_patches = bool(crop_to_patches)
        self.min_patches = min_patches
        self.max_patches = max_patches

    def normalize_chat_template(self, template: str) -> str:
        # Only the template's own text is rewritten, never a rendered prompt: a question may mention "<image>".
        context = getattr(self.processor, "image_token", None) or self.image_token
        if context not in template and LEGACY_IMAGE_PLACEHOLDER in template:
            return template.replace(LEGACY_IMAGE_PLACEHOLDER, context)
        return template

    vision_module_prefixes = ("model.vision_tower.", "model.multi_modal_projector.")
    vision_tower_prefixes = ("model.vision_tower.",)
    projector_prefixes = ("model.multi_modal_projector.",)

    def image_token_counts(self, width: int, height: int, config: Any) -> tuple[int, int]:
        # one tile unless tiling is on; then at most max_patches tiles plus a thumbnail (the worst case)
        tiles = 1 if not self.crop_to_patches else (self.max_patches or 12) + 1
        size = self.processor.image_processor.size
        patch = int(config.vision_config.patch_size[0])
        per_tile = int(self.processor.image_seq_length)
        tower = (int(size["height"]) // patch) * (int(size["width"]) // patch)
        return tiles * (per_tile + 2), tiles * tower  # + <img> and </img> around each tile's tokens

    def image_feature_units(self, prompt: PromptInputs) -> int:
        return int(prompt.mm_inputs["pixel_values"].shape[0])  # one entry per tile

    def processor_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"crop_to_patches": self.crop_to_patches}
        if self.min_patches is not None:
            kwargs["min_patches"] = self.min_patches
        if self.max_patches is not None:
            kwargs["max_patches"] = self.max_patches
        return kwargs
