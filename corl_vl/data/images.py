"""Opening images with errors a user can act on.

Datasets hold images as PIL images, encoded bytes or file paths. A corrupt PNG deep inside a training run
should stop the run with one line naming the file (and the row that referenced it), not a PIL traceback
hundreds of steps in. This module is generic on purpose: it returns RGB PIL images and nothing else;
resizing and tiling for a model family belong to that family's adapter.
"""

from __future__ import annotations

import io
from pathlib import Path

from PIL import Image, UnidentifiedImageError

from corl_vl.data.problem import ImageLike
from corl_vl.errors import CorlError
from corl_vl.io import special_file_kind

# What PIL raises for unreadable data: unknown format, truncated or corrupt streams, bad chunk CRCs.
_READ_ERRORS = (UnidentifiedImageError, OSError, SyntaxError, ValueError, Image.DecompressionBombError)


def _describe(source: ImageLike | bytes, where: str | None) -> str:
    name = f"image file {source}" if isinstance(source, str | Path) else "embedded image"
    return f"{where}: {name}" if where else name


def _check_plain(source: object, where: str | None) -> None:
    """A FIFO or device given as an image would block PIL's open forever (or never end): refuse it first."""
    if isinstance(source, str | Path):
        kind = special_file_kind(source)
        if kind is not None:
            raise CorlError(f"{_describe(source, where)} is {kind}, not an image file; give a plain file")


def open_image(source: ImageLike | bytes, *, where: str | None = None) -> Image.Image:
    """Decode ``source`` (PIL image, path or encoded bytes) into a fully loaded RGB image.

    ``where`` (e.g. ``"data/train.jsonl row 12 field 'image'"``) prefixes the error so the user knows which
    record to fix. Raises :class:`CorlError` for a missing file or undecodable data.
    """
    try:
        if isinstance(source, Image.Image):
            # An unloaded image over encoded bytes (see lazy_image) is decoded as a copy, so the dataset's
            # object keeps only the compressed bytes however often it is opened.
            fp = getattr(source, "fp", None)
            image = Image.open(io.BytesIO(fp.getvalue())) if isinstance(fp, io.BytesIO) else source
        elif isinstance(source, bytes | bytearray):
            image = Image.open(io.BytesIO(source))
        elif isinstance(source, str | Path):
            _check_plain(source, where)
            image = Image.open(Path(source))
        else:
            raise CorlError(
                f"{_describe(source, where)}: unsupported image value of type {type(source).__name__}"
            )
        image.load()
        return image if image.mode == "RGB" else image.convert("RGB")
    except FileNotFoundError:
        raise CorlError(f"{_describe(source, where)} not found") from None
    except _READ_ERRORS as err:
        raise CorlError(f"{_describe(source, where)} is corrupt or not an image ({err})") from None


# The strictest built-in image processor refuses a long side over 200 times the short side (docs/adapters.md), and
# the cohort shares one dataset, so that limit applies to every row (refused, not padded: padding changes the picture)
MAX_ASPECT_RATIO = 200


def check_aspect(size: tuple[int, int], what: str) -> None:
    """Refuse an empty image or one more elongated than :data:`MAX_ASPECT_RATIO` (``what`` names it)."""
    width, height = size
    if min(width, height) < 1:
        raise CorlError(f"{what} is empty ({width}x{height} pixels)")
    if max(width, height) > MAX_ASPECT_RATIO * min(width, height):
        raise CorlError(
            f"{what} is {width}x{height} pixels, an aspect ratio above {MAX_ASPECT_RATIO}:1 that no supported "
            "model family takes; crop it or leave the row out"
        )


def verify_image(source: str | Path | bytes, *, where: str | None = None, shape: bool = False) -> None:
    """Check that ``source`` exists and is a well-formed image without decoding its pixels (and, with
    ``shape``, that :func:`check_aspect` accepts it).

    Cheap enough to run over a whole dataset at load time (PIL's ``verify`` reads the header and checks
    chunk checksums), so a broken file is reported before training starts rather than mid-run.
    """
    _check_plain(source, where)
    try:
        stream = io.BytesIO(source) if isinstance(source, bytes | bytearray) else Path(source)
        with Image.open(stream) as image:
            if shape:
                check_aspect(image.size, _describe(source, where))
            image.verify()
    except FileNotFoundError:
        raise CorlError(f"{_describe(source, where)} not found") from None
    except IsADirectoryError:
        raise CorlError(f"{_describe(source, where)} is a directory, not an image") from None
    except _READ_ERRORS as err:
        raise CorlError(f"{_describe(source, where)} is corrupt or not an image ({err})") from None


def lazy_image(
    data: bytes, *, where: str | None = None, verify: bool = True, shape: bool = False
) -> Image.Image:
    """A PIL image over encoded ``data`` whose pixels are decoded only on first use.

    Embedded images (HF ``Image`` feature, parquet bytes) cannot be kept as paths; an opened-but-unloaded
    PIL image keeps only the compressed bytes in memory, so a large dataset stays small.
    """
    if verify:
        verify_image(data, where=where, shape=shape)
    try:
        return Image.open(io.BytesIO(data))
    except _READ_ERRORS as err:
        raise CorlError(f"{_describe(data, where)} is corrupt or not an image ({err})") from None
