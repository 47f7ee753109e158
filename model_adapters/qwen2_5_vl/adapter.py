"""Qwen2.5-VL: dynamic resolution on a 28-pixel grid and M-RoPE positions.

Family quirks handled here:
- images are resized once, in :meth:`Qwen25VLAdapter.prepare_image`, to the size the processor would pick
  (qwen-vl-utils ``smart_resize``: multiples of 28 within min/max pixels), so the HF processor and vLLM receive
  identical pixels and neither resizes again;
- every forward over prompt+completion carries ``mm_token_type_ids`` (1 on image tokens): without it transformers
  silently falls back to 1-D positions and logprobs drift while greedy output still looks right.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from PIL import Image as PILImage

from corl_vl.data.problem import ImageLike
from corl_vl.errors import CorlError
from model_adapters.base import ModelAdapter
from model_adapters.registry import register_adapter
from model_adapters.tiny import ensure_tiny

from .tiny import TINY

if TYPE_CHECKING:
    import torch
    from PIL import Image

    from model_adapters.records import PromptInputs


@register_adapter("qwen2_5_vl")
class Qwen25VLAdapter(ModelAdapter):
    """Qwen2.5-VL (``Qwen2_5_VLForConditionalGeneration``) through its own processor and chat template."""

    model_types = ("qwen2_5_vl",)
    image_token = "<|image_pad|>"

    @classmethod
    def tiny_checkpoint(cls, seed: int = 0) -> Path:
        return ensure_tiny(TINY, seed=seed)

    def _pixel_bounds(self) -> tuple[int, int, int]:
        """(grid factor, min pixels, max pixels): user options first, else the checkpoint's processor config."""
        ip = self.processor.image_processor
        size = getattr(ip, "size", None) or {}
        factor = int(ip.patch_size) * int(ip.merge_size)
        lo = self.image_options.min_pixels or size.get("shortest_edge") or getattr(ip, "min_pixels", None)
        hi = self.image_options.max_pixels or size.get("longest_edge") or getattr(ip, "max_pixels", None)
        if int(lo) > int(hi):  # one bound set by the user, the other the checkpoint's
            raise CorlError(
                f"adapter {self.name}: min_pixels {lo} > max_pixels {hi} (one comes from {self.model_path}'s "
                "processor config); set both image options"
            )
        return factor, int(lo), int(hi)

    def prepare_image(self, image: ImageLike) -> Image.Image:
        # lazy: qwen_vl_utils, torchvision (keeps `adapters list` light)
        from qwen_vl_utils import smart_resize

        image = super().prepare_image(image)
        factor, lo, hi = self._pixel_bounds()
        height, width = smart_resize(image.height, image.width, factor=factor, min_pixels=lo, max_pixels=hi)
        if (width, height) == image.size:
            return image

        return image.resize((width, height), PILImage.Resampling.BICUBIC)

    vision_module_prefixes = ("model.visual.",)
    # the merger (and Qwen3-VL's DeepStack mergers) sit inside model.visual: the tower is listed without them
    vision_tower_prefixes = ("model.visual.patch_embed.", "model.visual.pos_embed.", "model.visual.blocks.")
    projector_prefixes = ("model.visual.merger.", "model.visual.deepstack_merger_list.")

    def image_token_counts(self, width: int, height: int, config: Any) -> tuple[int, int]:
        from qwen_vl_utils import smart_resize  # lazy: torchvision

        cap = self.image_options.max_long_side
        scale = 1.0 if cap is None else min(1.0, cap / max(width, height))
        factor, lo, hi = self._pixel_bounds()
        h, w = smart_resize(
            round(height * scale), round(width * scale), factor=factor, min_pixels=lo, max_pixels=hi
        )
        patch = self.processor.image_processor.patch_size
        patches = (h // patch) * (w // patch)
        return patches // self.processor.image_processor.merge_size**2, patches

    def processor_kwargs(self) -> dict[str, Any]:
        # The image is already on the grid; passing the bounds keeps both processors from re-resizing it when
        # the user's bounds differ from the checkpoint's.
        _, lo, hi = self._pixel_bounds()
        return {"size": {"shortest_edge": lo, "longest_edge": hi}}

    per_row_mm_inputs = ("image_grid_thw",)  # M-RoPE positions are built from each row's grids

    def image_feature_units(self, prompt: PromptInputs) -> int:
        return int(prompt.mm_inputs["image_grid_thw"].shape[0])  # features come split per image

    def token_type_fields(self, input_ids: torch.Tensor) -> dict[str, torch.Tensor]:
        image_id = self.tokenizer.convert_tokens_to_ids(self.image_token)
        return {"mm_token_type_ids": (input_ids == image_id).int()}
