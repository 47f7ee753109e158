"""Loading problems from the formats people keep them in: ``save_to_disk`` folders, parquet, JSON, JSONL,
hub dataset ids and local copies of hub repositories (:mod:`corl_vl.data.hub`), and named recipes
(:mod:`corl_vl.data.dataset_recipes`).

Training, evaluation and paired views all need the same thing — a list of :class:`Problem` with stable ids —
from files whose column names differ. :class:`FieldMap` says which columns to use; everything else in a row
is carried through in ``Problem.meta``. Problems are keyed by id everywhere in Co-RL, so an id column is
required (``FieldMap(id=None)`` asks for row-index ids explicitly) and duplicate ids are an error. The one
exception: a source without ids in a known public layout (:mod:`corl_vl.data.layouts`) gets row-index ids
and that layout's field map when no field map is given.

Images stay lazy: paths stay paths (resolved against ``image_root``, else the source's folder) and embedded
bytes become unloaded PIL images, so a large dataset does not hold decoded pixels. They are checked at load
time (existence plus PIL's cheap ``verify``), so a broken file stops the run before training, with one line
naming the file, row and field.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from PIL import Image

from corl_vl.data.dataset_recipes import RECIPES, load_recipe_rows, split_recipe_name
from corl_vl.data.hub import decode_json_columns, is_hub_folder, load_rows, parse_hub_id
from corl_vl.data.images import _describe, check_aspect, lazy_image, verify_image
from corl_vl.data.layouts import detect_layout
from corl_vl.data.problem import ImageLike, Problem
from corl_vl.errors import CorlError
from corl_vl.io import MAX_JSON_BYTES, check_regular_file, loads_json, read_jsonl, read_text_file

Columns = str | tuple[str, ...] | None

__all__ = ["FieldMap", "decode_json_columns", "load_problems"]


@dataclass(frozen=True)
class FieldMap:
    """Which source column feeds each :class:`Problem` field.

    A string names one column, which must exist. A tuple lists candidates; the first present is used and,
    except for ``question``, none present is fine (Co-RL is label-free, so ``answer`` is optional). ``None``
    ignores the field. ``id=None`` numbers rows ``"0", "1", ...`` in source order (before ``limit``).
    ``text_question`` is the text-only rendering used when loading with ``text_only=True``.
    """

    id: str | None = "id"
    question: str | tuple[str, ...] = ("question", "problem", "prompt")
    answer: Columns = ("answer",)
    images: Columns = ("images", "image")
    choices: Columns = ("choices", "options")
    text_question: Columns = ("text_question",)


@dataclass
class _Source:
    label: str  # how errors name the source (its path, plus the split)
    base: Path  # where relative image paths are resolved when no image_root is given
    columns: list[str]
    rows: list[dict[str, Any]]


def _pick(columns: list[str], spec: Columns, field: str, label: str, *, required: bool = False) -> str | None:
    if spec is None:
        return None
    if isinstance(spec, str):
        if spec not in columns:
            raise CorlError(f"{label}: no column {spec!r} for {field} (columns: {', '.join(columns)})")
        return spec
    found = next((c for c in spec if c in columns), None)
    if found is None and required:
        raise CorlError(
            f"{label}: no {field} column (tried {', '.join(spec)}; columns: {', '.join(columns)})"
        )
    return found


def _read_disk_dataset(path: Path, split: str | None, limit: int | None) -> _Source:
    # lazy: datasets
    from datasets import DatasetDict, load_from_disk

    try:
        loaded = load_from_disk(str(path))
    except Exception as err:  # datasets raises several types for a broken folder
        raise CorlError(f"{path}: cannot read saved dataset ({type(err).__name__}: {err})") from None
    label = str(path)
    if isinstance(loaded, DatasetDict):
        if split is None:
            if len(loaded) != 1:
                raise CorlError(f"{path}: has splits {', '.join(loaded)}; choose one with split=")
            split = next(iter(loaded))
        if split not in loaded:
            raise CorlError(f"{path}: no split {split!r} (splits: {', '.join(loaded)})")
        loaded, label = loaded[split], f"{path} [{split}]"
    elif split is not None:
        raise CorlError(f"{path}: is a single dataset without splits, but split={split!r} was given")
    stop = len(loaded) if limit is None else min(limit, len(loaded))
    table = loaded.with_format("arrow")[:stop]  # raw Arrow: images stay encoded, nothing is decoded
    return _Source(label, path, list(loaded.column_names), decode_json_columns(table))


def _read_parquet(path: Path, limit: int | None) -> _Source:
    # lazy: pyarrow
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except Exception as err:  # pyarrow raises ArrowInvalid / OSError for corrupt files
        raise CorlError(f"{path}: cannot read parquet ({err})") from None
    if limit is not None:
        table = table.slice(0, limit)
    return _Source(str(path), path.parent, list(table.column_names), decode_json_columns(table))


def _read_json(path: Path, id_column: str | None, limit: int | None) -> _Source:
    if path.suffix == ".jsonl":
        rows: Any = [row for _, row in read_jsonl(path)]
    else:
        try:
            rows = loads_json(read_text_file(path, "data file", limit=MAX_JSON_BYTES), str(path))
        except json.JSONDecodeError as err:
            raise CorlError(f"{path}: invalid JSON ({err.msg} at column {err.colno})") from None
    if isinstance(rows, dict):  # {id: row}: the key is the id
        key_column = id_column or "id"
        keyed = []
        for key, row in rows.items():
            if not isinstance(row, dict):
                raise CorlError(f"{path}: entry {key!r} is not an object")
            if key_column in row and str(row[key_column]) != key:
                raise CorlError(f"{path}: entry {key!r} has a different {key_column!r} ({row[key_column]!r})")
            keyed.append({**row, key_column: key})
        rows = keyed
    if not isinstance(rows, list):
        raise CorlError(
            f"{path}: expected a list of rows or an object keyed by id, got {type(rows).__name__}"
        )
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            raise CorlError(f"{path} row {i}: expected an object, got {type(row).__name__}")
    rows = rows if limit is None else rows[:limit]
    columns = list(dict.fromkeys(key for row in rows for key in row))
    return _Source(str(path), path.parent, columns, rows)


def _read_named(text: str, split: str | None, limit: int | None) -> _Source:
    """A recipe name (``mmr1-math[@split]``) or a hub id (``ORG/NAME[:config][@split]``)."""
    name, named_split = split_recipe_name(text)
    if name in RECIPES:
        label, columns, rows = load_recipe_rows(RECIPES[name], split=named_split or split, limit=limit)
        return _Source(label, Path.cwd(), columns, rows)
    ref = parse_hub_id(text)
    if ref is None:
        raise CorlError(f"{text}: no such file or folder")
    split = ref.split or split or "train"
    label = f"{ref.repo} [{split}]"
    columns, rows = load_rows(ref.repo, config=ref.config, split=split, label=label, limit=limit)
    return _Source(label, Path.cwd(), columns, rows)


def _read(path: Path, split: str | None, fields: FieldMap, limit: int | None) -> _Source:
    if not path.exists():
        return _read_named(str(path), split, limit)
    if path.is_dir():
        if any((path / marker).exists() for marker in ("dataset_dict.json", "state.json")):
            return _read_disk_dataset(path, split, limit)
        if not is_hub_folder(path):
            raise CorlError(
                f"{path}: a folder that is neither a datasets save_to_disk folder nor a copy of a hub "
                "dataset (data files such as data/train-00000-of-00001.parquet)"
            )
        split = split or "train"
        columns, rows = load_rows(path, split=split, label=f"{path} [{split}]", limit=limit)
        return _Source(f"{path} [{split}]", path, columns, rows)
    check_regular_file(path, "data file")  # a FIFO or device would block the reader forever
    if split is not None:
        raise CorlError(f"{path}: a single file has no splits, but split={split!r} was given")
    if path.suffix == ".parquet":
        return _read_parquet(path, limit)
    if path.suffix in (".json", ".jsonl"):
        return _read_json(path, fields.id, limit)
    raise CorlError(f"{path}: unsupported format (use a save_to_disk folder, .parquet, .json or .jsonl)")


def _with_known_layout(src: _Source) -> _Source:
    """Rows of a recognised public dataset (MMR1, multimodal-open-r1, MATH) in the default columns."""
    layout = detect_layout(src.columns)
    if layout is None:
        return src
    rows = layout.normalize(src.rows)
    columns = list(dict.fromkeys(key for row in rows for key in row)) if rows else ["id", "question"]
    return _Source(src.label, src.base, columns, rows)


def _images(value: Any, where: str, root: Path, check: bool) -> list[ImageLike]:
    if value is None:
        return []
    items = value if isinstance(value, list | tuple) else [value]
    images: list[ImageLike] = []
    for item in items:
        if isinstance(item, dict):  # HF Image feature storage: {"bytes": ..., "path": ...}
            item = item.get("bytes") or item.get("path")
        if item is None:
            continue
        if isinstance(item, Image.Image):
            if check:
                check_aspect(item.size, _describe(item, where))
            images.append(item)
        elif isinstance(item, bytes | bytearray):
            images.append(lazy_image(bytes(item), where=where, verify=check, shape=check))
        elif isinstance(item, str | Path):
            path = Path(item).expanduser()
            path = path if path.is_absolute() else root / path
            if check:
                verify_image(path, where=where, shape=True)
            images.append(str(path))
        else:
            raise CorlError(f"{where}: unsupported image value of type {type(item).__name__}")
    return images


def _choices(value: Any, where: str) -> list[str] | None:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            raise CorlError(f"{where}: expected a list of options, got the string {value[:40]!r}") from None
    if value is None or (isinstance(value, list | tuple) and not value):
        return None
    if not isinstance(value, list | tuple):
        raise CorlError(f"{where}: expected a list of options, got {type(value).__name__}")
    return [str(option) for option in value]


MAX_QUESTION_CHARS = 1_000_000  # above every shipped model's context (~4 characters per token)


def _text(value: Any, where: str = "", *, limit: int | None = None) -> str | None:
    """A text field: a string, or a number converted on purpose (ids and answers such as ``12`` or ``0.5``).

    Anything else (a list, a dict, true/false, NaN) is refused: ``str()`` would turn it into its Python repr,
    which no answer ever matches. ``limit`` bounds the length (a 50 MB question stops the tokenizer)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise CorlError(f"{where}: expected text or a number, got {type(value).__name__} {str(value)[:40]!r}")
    if isinstance(value, float) and not math.isfinite(value):
        raise CorlError(f"{where}: expected text or a finite number, got {value}")
    text = str(value).strip()
    if limit is not None and len(text) > limit:
        raise CorlError(f"{where}: {len(text):,} characters, more than the {limit:,} any model here can take")
    return text or None


def load_problems(
    source: str | Path,
    *,
    split: str | None = None,
    fields: FieldMap | None = None,
    image_root: Path | None = None,
    text_only: bool = False,
    limit: int | None = None,
    require_answer: bool = False,
    check_images: bool = True,
) -> list[Problem]:
    """Read problems from a ``save_to_disk`` folder (Dataset or DatasetDict), ``.parquet``, ``.json``, ``.jsonl``,
    a local copy of a hub dataset, a hub id ``ORG/NAME[:config][@split]`` or a recipe name ``NAME[@split]``.

    Args:
        source: the file, folder, hub id or recipe. JSON may be a list of rows or an object keyed by id.
        split: the split of a DatasetDict or hub dataset (a DatasetDict with one split may omit it; hub
            sources default to ``train``; ``@split`` in a hub id or recipe name wins); files have no splits.
        fields: column mapping (see :class:`FieldMap`); unmapped columns go to ``Problem.meta``.
        image_root: folder for relative image paths; default the source file's folder (or the dataset folder).
        text_only: the text rendering for text LLMs: question from the ``text_question`` column, no images.
            A row with images but no text rendering is an error (a text model could not see the picture).
        limit: read only the first ``limit`` rows.
        require_answer: every row must have a non-empty answer (evaluation, GT reward).
        check_images: check image files exist and are well-formed now (cheap, pixels are not decoded).

    Raises:
        CorlError: one line naming the file, row and field for any bad input.
    """
    if limit is not None and limit < 0:
        raise CorlError(f"limit must be >= 0, got {limit}")
    known_layout = fields is None  # no field map given: a known dataset layout may supply it
    fields = fields or FieldMap()
    src = _read(Path(source).expanduser(), split, fields, limit)
    if known_layout and fields.id not in src.columns:
        src = _with_known_layout(src)
    cols = _columns(src, fields, require_answer)
    root = Path(image_root).expanduser() if image_root is not None else src.base
    problems: list[Problem] = []
    first_row: dict[str, int] = {}
    for i, row in enumerate(src.rows):
        problem = _problem_of_row(
            row, f"{src.label} row {i}", i, cols, root, text_only, require_answer, check_images
        )
        if problem.id in first_row:
            raise CorlError(
                f"{src.label}: duplicate id {problem.id!r} (rows {first_row[problem.id]} and {i})"
            )
        first_row[problem.id] = i
        problems.append(problem)
    return problems


@dataclass(frozen=True)
class _Columns:
    """The source's columns that hold each field (None: absent), resolved once per source."""

    id: str | None
    question: str
    answer: str | None
    images: str | None
    choices: str | None
    text: str | None

    @property
    def used(self) -> set[str | None]:  # everything else goes to Problem.meta
        return {self.id, self.question, self.answer, self.images, self.choices}


def _columns(src: _Source, fields: FieldMap, require_answer: bool) -> _Columns:
    label, columns = src.label, src.columns
    if fields.id is not None and fields.id not in columns:
        raise CorlError(
            f"{label}: no id column {fields.id!r} (columns: {', '.join(columns)}); "
            "name it with FieldMap(id=...) or use FieldMap(id=None) for row-index ids"
        )
    cols = _Columns(
        id=fields.id,
        question=_pick(columns, fields.question, "question", label, required=True),
        answer=_pick(columns, fields.answer, "answer", label),
        images=_pick(columns, fields.images, "images", label),
        choices=_pick(columns, fields.choices, "choices", label),
        text=_pick(columns, fields.text_question, "text_question", label),
    )
    if require_answer and cols.answer is None:
        raise CorlError(
            f"{label}: no answer column, but answers are required (columns: {', '.join(columns)})"
        )
    return cols


def _problem_of_row(
    row: dict[str, Any],
    where: str,
    index: int,
    cols: _Columns,
    root: Path,
    text_only: bool,
    require_answer: bool,
    check_images: bool,
) -> Problem:
    """One row as a :class:`Problem` (``where``: "FILE row N", for the one-line errors)."""
    pid = str(index) if cols.id is None else _text(row.get(cols.id), f"{where} field {cols.id!r}")
    if pid is None:
        raise CorlError(f"{where}: empty {cols.id!r}")
    question = _text(row.get(cols.question), f"{where} field {cols.question!r}", limit=MAX_QUESTION_CHARS)
    answer = _text(row.get(cols.answer), f"{where} field {cols.answer!r}") if cols.answer else None
    if require_answer and answer is None:
        raise CorlError(f"{where} (id {pid!r}): empty {cols.answer!r}")
    check = check_images and not text_only  # a text-only view never opens the pictures
    images = (
        _images(row.get(cols.images), f"{where} field {cols.images!r}", root, check) if cols.images else []
    )
    if text_only:
        text = None
        if cols.text:
            text = _text(row.get(cols.text), f"{where} field {cols.text!r}", limit=MAX_QUESTION_CHARS)
        if text is None and images:
            raise CorlError(f"{where} (id {pid!r}): has an image but no text rendering (text_question)")
        question, images = text or question, []
    if question is None:
        raise CorlError(f"{where} (id {pid!r}): empty {cols.question!r}")
    choices = _choices(row.get(cols.choices), f"{where} field {cols.choices!r}") if cols.choices else None
    meta = {key: value for key, value in row.items() if key not in cols.used}
    return Problem(pid, question, images, choices, answer, meta)
