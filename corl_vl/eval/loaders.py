"""Benchmark loading: the official hub dataset, or a local copy in the benchmark's own format.

Why one generic loader with small per-benchmark converters (:mod:`corl_vl.eval.benchmarks`): every benchmark
ships the same few containers (a JSON dict keyed by id, a JSON list, JSONL, parquet, CSV) with images either
embedded or as paths relative to the annotation file's folder. Reading them is one job; turning a row into a
:class:`~corl_vl.data.problem.Problem` with the benchmark's fields in ``meta`` is the other.

Scoring existing responses needs only the annotations (``annotations_only=True``): images are then neither
opened nor required, so e.g. MathVista's ``testmini.json`` or MathVision's ``test.jsonl`` alone suffice.
Otherwise a missing image or field is one :class:`CorlError` naming the file, the record and the field.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from corl_vl.data.problem import Problem
from corl_vl.errors import CorlError
from corl_vl.eval.benchmark_rows import BenchmarkSpec, RowContext
from corl_vl.eval.benchmarks import get_spec
from corl_vl.io import MAX_JSON_BYTES, check_regular_file, loads_json, read_jsonl, read_text_file

__all__ = [
    "BenchmarkSpec",
    "RowContext",
    "find_annotation_files",
    "load_benchmark",
    "read_annotation_file",
    "whole_groups",
]

_ANNOTATION_SUFFIXES = (".json", ".jsonl", ".parquet", ".csv")


# ---------------------------------------------------------------------------------------------- file reading
def _read_json(path: Path) -> list[dict[str, Any]]:
    try:
        data = loads_json(read_text_file(path, "benchmark file", limit=MAX_JSON_BYTES), str(path))
    except json.JSONDecodeError as err:
        raise CorlError(f"{path}: not valid JSON ({err})") from None
    if isinstance(data, dict):
        # MathVista: a dict keyed by pid; other dumps wrap the rows in {"data": [...]}.
        if isinstance(data.get("data"), list):
            data = data["data"]
        else:
            data = list(data.values())
    if not isinstance(data, list) or not all(isinstance(r, dict) for r in data):
        raise CorlError(f"{path}: expected a list of records or a dict of records keyed by id")
    return data


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [row for _, row in read_jsonl(path)]


def _read_parquet(path: Path) -> list[dict[str, Any]]:
    # lazy: pyarrow
    import pyarrow.parquet as pq

    try:
        return pq.read_table(path).to_pylist()
    except Exception as err:  # pyarrow raises several unrelated types for a bad file
        raise CorlError(f"{path}: cannot read parquet ({err})") from None


def _read_csv(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8", newline="") as fh:
        return list(csv.DictReader(fh))


def read_annotation_file(path: Path) -> list[dict[str, Any]]:
    """All rows of one annotation file (json, jsonl, parquet or csv)."""
    readers = {".json": _read_json, ".jsonl": _read_jsonl, ".parquet": _read_parquet, ".csv": _read_csv}
    reader = readers.get(path.suffix.lower())
    if reader is None:
        raise CorlError(f"{path}: unsupported annotation format (use {', '.join(_ANNOTATION_SUFFIXES)})")
    if not path.exists():
        raise CorlError(f"annotation file not found: {path}")
    check_regular_file(path, "annotation file")
    return reader(path)


def find_annotation_files(folder: Path, split: str | None, spec: BenchmarkSpec) -> list[Path]:
    """The annotation file(s) of ``split`` inside a benchmark folder.

    Looks for ``<split>.<ext>`` (also under ``data/``) and HF snapshot shards ``<split>-*.parquet``; when the
    split was not given and the folder holds exactly one annotation file, that file is used (e.g. MathVerse's
    ``testmini_text_only.json``).
    """
    wanted = [split] if split else list(spec.splits)
    for name in wanted:
        for base in (folder, folder / "data"):
            for ext in _ANNOTATION_SUFFIXES:
                if (
                    base / f"{name}{ext}"
                ).exists():  # not is_file(): a FIFO there is refused by name, not skipped
                    return [base / f"{name}{ext}"]
            shards = sorted(base.glob(f"{name}-*.parquet"))
            if shards:
                return shards
    found = sorted(
        p
        for base in (folder, folder / "data")
        if base.is_dir()
        for p in base.iterdir()
        if p.suffix.lower() in _ANNOTATION_SUFFIXES and not p.is_dir()
    )
    if split is None and len(found) == 1:
        return found
    listing = ", ".join(p.name for p in found) or "no annotation files"
    raise CorlError(
        f"{folder}: no annotation file for {spec.name} split '{split or spec.splits[0]}' (found: {listing}); "
        f"pass the annotation file itself or --split"
    )


def _hub_rows(
    spec: BenchmarkSpec, split: str, annotations_only: bool
) -> tuple[Iterator[dict[str, Any]], str]:
    """The hub split's rows; image columns are dropped when only annotations are needed (no decoding)."""
    # lazy: datasets
    import datasets

    label = f"hub:{spec.hub_id}{'/' + spec.hub_config if spec.hub_config else ''}:{split}"
    try:
        ds = datasets.load_dataset(spec.hub_id, spec.hub_config, split=split)
    except Exception as err:  # network, auth (GPQA is gated), unknown split: one line, then a way out
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise CorlError(
            f"cannot load {spec.name} from the hub ({label}): {first}; pass --data with a local copy"
        ) from None
    if annotations_only:
        images = [name for name, feature in ds.features.items() if isinstance(feature, datasets.Image)]
        ds = ds.remove_columns(images) if images else ds
    return iter(ds), label


# ---------------------------------------------------------------------------------------------- entry point
def load_benchmark(
    name: str,
    data: str | Path | None = None,
    *,
    split: str | None = None,
    annotations_only: bool = False,
    limit: int | None = None,
) -> list[Problem]:
    """The benchmark's records as Problems, in source order, with unique string ids.

    Args:
        name: a benchmark name (see :data:`corl_vl.eval.benchmarks.SPECS`).
        data: a local folder or annotation file; None loads the official hub dataset.
        split: which split (default: the benchmark's first known split).
        annotations_only: skip images entirely (scoring existing responses).
        limit: keep only the first ``limit`` records; for a grouped benchmark (We-Math), the first whole
            groups (in order of first appearance) until at least ``limit`` records, so that no group is cut.
    """
    spec = get_spec(name)
    if split is not None and data is None and split not in spec.splits:
        raise CorlError(f"{name}: unknown split '{split}'; known: {', '.join(spec.splits)}")
    sources: list[tuple[Iterable[dict[str, Any]], str, Path | None]] = []
    if data is None:
        rows, label = _hub_rows(spec, split or spec.splits[0], annotations_only)
        sources.append((rows, label, None))
    else:
        path = Path(data).expanduser()
        if path.is_dir():
            files = find_annotation_files(path, split, spec)
            root = path
        elif path.exists():  # a FIFO or device is refused by name, not as missing
            check_regular_file(path, "annotation file")
            files, root = [path], path.parent
        else:
            raise CorlError(f"{name}: --data {path} does not exist")
        sources += [(read_annotation_file(f), str(f), root) for f in files]

    problems: list[Problem] = []
    seen: dict[str, str] = {}
    index = 0
    row_limit = None if spec.grouped else limit
    for rows, label, root in sources:
        for row in rows:
            if row_limit is not None and len(problems) >= row_limit:
                break
            ctx = RowContext(source=label, index=index, root=root, annotations_only=annotations_only)
            problem = spec.to_problem(dict(row), ctx)
            if problem.id in seen:
                raise CorlError(f"{ctx.where(problem.id)}: duplicate id (first seen at {seen[problem.id]})")
            seen[problem.id] = ctx.where()
            problems.append(problem)
            index += 1
    if not problems:
        raise CorlError(f"{name}: no records found in {data or spec.hub_id}")
    return whole_groups(problems, limit) if spec.grouped and limit is not None else problems


def whole_groups(problems: list[Problem], limit: int) -> list[Problem]:
    """The records of the first groups (by first appearance) until at least ``limit`` records, in source
    order: We-Math's sub-problems of one group are far apart in its file, so its first rows form no group."""
    sizes: dict[str, int] = {}
    for p in problems:
        group = str(p.meta.get("group", p.id))
        sizes[group] = sizes.get(group, 0) + 1
    chosen: set[str] = set()
    taken = 0
    for group, size in sizes.items():
        if taken >= limit:
            break
        chosen.add(group)
        taken += size
    return [p for p in problems if str(p.meta.get("group", p.id)) in chosen]
