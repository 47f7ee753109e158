"""Family-agnostic image preparation shared by the adapters: open, convert to RGB, cap the long side.

Why here: every family gets the same first step (the release resizes so the long side is ≤ 1024, bicubic, for
training and evaluation alike); family-specific rounding (Qwen's factor-28 grid, InternVL tiles, Gemma's 896²)
happens afterwards in the adapter or its HF processor. Problems hold images as PIL objects or paths opened here
lazily, so a broken file surfaces as one :class:`CorlError` naming it, not a PIL traceback mid-training.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, UnidentifiedImageError

from corl_vl.errors import CorlError


@dataclass
class ImageOptions:
    """How images are prepared before the family's processor sees them.

    Attributes:
        max_long_side: cap on the longer side in pixels (aspect kept, bicubic); None = no cap.
        min_pixels: lower bound on width×height for dynamic-resolution families (Qwen2.5-VL); None = family default.
        max_pixels: upper bound on width×height for dynamic-resolution families; None = family default.
    """

    max_long_side: int | None = 1024
    min_pixels: int | None = None
    max_pixels: int | None = None

    def __post_init__(self) -> None:
        for name in ("max_long_side", "min_pixels", "max_pixels"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value <= 0):
                raise CorlError(f"image option {name} must be a positive integer or null, got {value!r}")
        if self.min_pixels and self.max_pixels and self.min_pixels > self.max_pixels:
            raise CorlError(f"image options: min_pixels {self.min_pixels} > max_pixels {self.max_pixels}")


def image_options_from(
    value: ImageOptions | dict[str, Any] | None, defaults: ImageOptions, where: str = "image_options"
) -> ImageOptions:
    """``value`` as :class:`ImageOptions`: a mapping (``adapter_kwargs: {image_options: {...}}`` in YAML)
    overrides ``defaults`` key by key; an unknown key is one line naming the known ones."""
    if value is None:
        return defaults
    if isinstance(value, ImageOptions):
        return value
    if not isinstance(value, dict):
        raise CorlError(f"{where}: expected a mapping of image options, got {type(value).__name__} {value!r}")
    known = [f.name for f in fields(ImageOptions)]
    unknown = sorted(str(k) for k in value if k not in known)
    if unknown:
        raise CorlError(f"{where}: unknown key '{unknown[0]}'; known: {', '.join(known)}")
    return ImageOptions(**{**asdict(defaults), **value})


def load_image(image: Image.Image | str | Path, *, what: str | None = None) -> Image.Image:
    """Open ``image`` if it is a path, decode it fully and return an RGB copy.

    Transparent pixels are composited on white (dropping alpha would turn them black, often the ink colour of a
    diagram). ``what`` names the image in errors when it is an in-memory object.
    """
    if isinstance(image, (str, Path)):
        path = Path(image)
        if not path.is_file():
            raise CorlError(f"image file not found: {path}")
        try:
            with Image.open(path) as opened:
                opened.load()  # Image.open is lazy: force decoding so truncated files fail here
                return to_rgb(opened)
        except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as err:
            raise CorlError(f"cannot read image {path}: {err}") from None
    if not isinstance(image, Image.Image):
        raise CorlError(f"{what or 'image'}: expected a PIL image or a file path, got {type(image).__name__}")
    try:
        image.load()
        return to_rgb(image)
    except (OSError, ValueError) as err:
        name = what or getattr(image, "filename", None) or "in-memory image"
        raise CorlError(f"cannot read image {name}: {err}") from None


def to_rgb(image: Image.Image) -> Image.Image:
    """Any PIL mode (RGBA, LA, P with transparency, L, I;16, CMYK, …) → RGB; alpha composited on white."""
    if image.mode == "RGB":
        return image.copy()
    if image.mode == "P" and "transparency" in image.info:
        image = image.convert("RGBA")
    if image.mode in ("RGBA", "LA", "PA"):
        rgba = image.convert("RGBA")
        background = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(background, rgba).convert("RGB")
    if image.mode in ("I", "I;16", "I;16B", "I;16L", "F"):
        # 16/32-bit greyscale: PIL's convert clips at 255 instead of scaling; scale 16-bit ranges to 8 bit.
        values = np.asarray(image, dtype=np.float64)
        if values.max(initial=0) > 255:
            values = values * (255.0 / (65535.0 if values.max() <= 65535 else values.max()))
        image = Image.fromarray(np.clip(np.rint(values), 0, 255).astype(np.uint8), mode="L")
    return image.convert("RGB")


def resize_long_side(image: Image.Image, max_long_side: int | None) -> Image.Image:
    """Downscale (never upscale) so the longer side is ≤ ``max_long_side``, keeping the aspect ratio (bicubic)."""
    if max_long_side is None:
        return image
    width, height = image.size
    long_side = max(width, height)
    if long_side <= max_long_side:
        return image
    scale = max_long_side / long_side
    size = (max(1, round(width * scale)), max(1, round(height * scale)))
    return image.resize(size, Image.Resampling.BICUBIC)
