"""What a benchmark is (:class:`BenchmarkSpec`) and the helpers its row converters share.

Why apart from :mod:`corl_vl.eval.loaders`: the per-benchmark converters (:mod:`corl_vl.eval.benchmarks`) use
these helpers and the loader uses the converters' table, so the shared piece sits below both.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from corl_vl.data.problem import ImageLike, Problem
from corl_vl.errors import CorlError
from corl_vl.io import check_answer_value


@dataclass
class RowContext:
    """Where a row came from, so converters can name it in errors and resolve relative image paths."""

    source: str  # file path or "hub:<id>[/<config>]:<split>"
    index: int  # position of the row in its source
    root: Path | None  # folder that relative image paths are relative to (None for hub rows)
    annotations_only: bool

    def where(self, record_id: str | None = None) -> str:
        rec = f"record {record_id}" if record_id is not None else f"row {self.index}"
        return f"{self.source} {rec}"


@dataclass(frozen=True)
class BenchmarkSpec:
    """How to find and read one benchmark.

    Attributes:
        name: the CLI name (``mathvista``).
        hub_id, hub_config: ``datasets.load_dataset(hub_id, hub_config, split=...)``.
        splits: known splits; the first is the default.
        to_problem: converts one row (a dict) to a Problem; raises CorlError on bad rows.
        samples: default responses per record when generating (AMC is scored avg@8).
        multimodal: whether records carry images (text benchmarks never do).
        grouped: records form groups scored together (``meta["group"]``, We-Math): ``limit`` takes whole
            groups.
    """

    name: str
    hub_id: str
    hub_config: str | None
    splits: tuple[str, ...]
    to_problem: Callable[[dict[str, Any], RowContext], Problem]
    samples: int = 1
    multimodal: bool = True
    grouped: bool = False


# ---------------------------------------------------------------------------------------------- row helpers
def require(row: dict[str, Any], name: str, ctx: RowContext, record_id: str | None = None) -> Any:
    """``row[name]``, or a CorlError naming the file, record and missing field."""
    if name not in row or row[name] is None:
        raise CorlError(f"{ctx.where(record_id)}: missing field '{name}'")
    return row[name]


def first_present(
    row: dict[str, Any], names: Iterable[str], ctx: RowContext, record_id: str | None = None
) -> Any:
    """The first of ``names`` present (non-None) in ``row``: hub and repository copies name fields differently."""
    names = list(names)
    for name in names:
        if row.get(name) is not None:
            return row[name]
    raise CorlError(f"{ctx.where(record_id)}: missing field '{names[0]}' (also tried {', '.join(names[1:])})")


def answer_text(value: Any, ctx: RowContext, record_id: str, name: str = "answer") -> str:
    """A gold answer as text; true/false, NaN, a list, an object … are refused naming file, record and field."""
    return as_text(check_answer_value(value, f"{ctx.where(record_id)} field '{name}'"))


def as_text(value: Any) -> str:
    """Answers arrive as str, int or float (AMC stores 142.0): integral floats print as integers."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value).strip()


def resolve_image(
    value: Any, ctx: RowContext, record_id: str, field: str, *, subdirs: tuple[str, ...] = ()
) -> ImageLike | None:
    """One image from a row value: a PIL image, embedded bytes (``{"bytes": …}``) or a path.

    Relative paths are tried under the annotation folder, then under each of ``subdirs`` of it. Returns None for
    an empty value; the caller decides whether the record needs an image. Paths are checked to exist (cheap);
    embedded bytes are verified and wrapped lazily so a whole benchmark is not decoded up front.
    """
    # lazy: PIL
    from PIL import Image

    from corl_vl.data.images import lazy_image

    where = f"{ctx.where(record_id)} field '{field}'"
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if isinstance(value, Image.Image):
        return value
    if isinstance(value, dict):
        if value.get("bytes"):
            return lazy_image(value["bytes"], where=where)
        value = value.get("path")
        if not value:
            return None
    if isinstance(value, bytes | bytearray):
        return lazy_image(bytes(value), where=where)
    if not isinstance(value, str | Path):
        raise CorlError(f"{where}: unsupported image value of type {type(value).__name__}")
    path = Path(value)
    if path.is_absolute():
        candidates = [path]
    elif ctx.root is None:
        raise CorlError(
            f"{where}: image path '{value}' but the rows come from the hub (no folder to resolve it)"
        )
    else:
        candidates = [ctx.root / path, *(ctx.root / sub / path for sub in subdirs)]
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    raise CorlError(f"{where}: image file not found: {candidates[0]}")


def record_images(
    row: dict[str, Any],
    fields: Iterable[str],
    ctx: RowContext,
    record_id: str,
    *,
    required: bool = True,
    subdirs: tuple[str, ...] = (),
) -> list[ImageLike]:
    """The record's image (first non-empty of ``fields``) as a one-element list, or ``[]``.

    With ``ctx.annotations_only`` nothing is resolved or required. Otherwise a record that needs an image but
    has none, or names a file that does not exist, is a CorlError naming the record and field.
    """
    if ctx.annotations_only:
        return []
    fields = list(fields)
    for field in fields:
        image = resolve_image(row.get(field), ctx, record_id, field, subdirs=subdirs)
        if image is not None:
            return [image]
    if required:
        raise CorlError(f"{ctx.where(record_id)}: no image (field '{fields[-1]}')")
    return []
