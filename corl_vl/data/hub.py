"""Datasets from the Hugging Face hub, and local folders laid out as the hub stores them.

``data.train`` may name a hub dataset as ``ORG/NAME``, optionally ``ORG/NAME:config`` and ``…@split``. It is
loaded with ``datasets.load_dataset`` (cached in the one cache folder, so a second run reads the cache). A
local copy of a hub repository (``data/train-00000-of-00001.parquet`` …, as ``hf download`` writes it) goes
through the very same loader, so what works offline on a copy works online on the id.

Rows come back as raw Arrow values: images stay encoded bytes and are decoded only when a prompt is built.
Without network (or with ``HF_HUB_OFFLINE=1``) and nothing cached, the error is one line naming the dataset
and how to stage it on a machine with internet.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from corl_vl.errors import CorlError

_HUB_ID = re.compile(
    r"^(?P<repo>[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*)(?::(?P<config>[\w.-]+))?(?:@(?P<split>[\w.-]+))?$"
)
_FILE_SUFFIXES = (".json", ".jsonl", ".parquet", ".arrow", ".csv")


@dataclass(frozen=True)
class HubRef:
    """A parsed ``ORG/NAME[:config][@split]``."""

    repo: str
    config: str | None = None
    split: str | None = None

    def __str__(self) -> str:
        config = f":{self.config}" if self.config else ""
        split = f"@{self.split}" if self.split else ""
        return f"{self.repo}{config}{split}"


def parse_hub_id(text: str) -> HubRef | None:
    """``ORG/NAME[:config][@split]`` → :class:`HubRef`; None for anything that reads as a local path."""
    if text.startswith((".", "/", "~")) or text.endswith(_FILE_SUFFIXES):
        return None
    match = _HUB_ID.match(text)
    if match is None:
        return None
    return HubRef(match["repo"], match["config"], match["split"])


def is_hub_folder(path: Path) -> bool:
    """A local folder holding a hub repository's data files (parquet / JSON / arrow, split by file name)."""
    patterns = ("*.parquet", "*.jsonl", "*.json", "*.arrow", "*.csv")
    return any(next(path.rglob(p), None) is not None for p in patterns)


def _offline(err: BaseException) -> bool:
    """Did loading fail because the hub cannot be reached (no network, offline mode), as opposed to a bad id?"""
    text = f"{type(err).__name__}: {err}"
    markers = ("Couldn't reach", "OfflineModeIsEnabled", "LocalEntryNotFoundError", "ConnectError", "Timeout")
    return isinstance(err, ConnectionError) or any(m in text for m in markers)


def stage_hint(repo: str, recipe: str | None = None, *, preparing: bool = False) -> str:
    """How to stage a dataset on a machine with internet, for compute nodes without it."""
    if preparing:  # already `data prepare`: run it elsewhere, or feed it a downloaded copy
        return (
            "run it on a machine with internet, or download the repository there "
            f"(`hf download {repo} --repo-type dataset --local-dir DIR`) and pass --source DIR"
        )
    if recipe is not None:
        return (
            f"on a machine with internet run `corl-vl data prepare {recipe} --out DIR`, copy DIR here "
            "and set data.train=DIR"
        )
    return (
        f"on a machine with internet run `hf download {repo} --repo-type dataset --local-dir DIR`, "
        "copy DIR here and set data.train=DIR"
    )


def decode_json_columns(table: Any) -> list[dict[str, Any]]:
    """Rows of a pyarrow table; columns of Arrow's JSON extension type (HF ``Json`` feature) are parsed."""
    rows = table.to_pylist()
    json_columns = [f.name for f in table.schema if getattr(f.type, "extension_name", None) == "arrow.json"]
    for row in rows:
        for name in json_columns:
            if isinstance(row[name], str):
                row[name] = json.loads(row[name])
    return rows


@contextmanager
def _quiet_hub_logs() -> Iterator[None]:
    # lazy: datasets, huggingface_hub
    import datasets
    from huggingface_hub.utils import logging as hub_logging

    levels = hub_logging.get_verbosity(), datasets.logging.get_verbosity()
    hub_logging.set_verbosity_error()
    datasets.logging.set_verbosity_error()
    try:
        yield
    finally:
        hub_logging.set_verbosity(levels[0])
        datasets.logging.set_verbosity(levels[1])


def load_rows(
    target: str | Path,
    *,
    config: str | None = None,
    split: str = "train",
    label: str | None = None,
    recipe: str | None = None,
    limit: int | None = None,
    preparing: bool = False,
) -> tuple[list[str], list[dict[str, Any]]]:
    """(columns, rows) of one split of a hub dataset id or a local hub-layout folder, images left encoded.

    Args:
        target: ``ORG/NAME`` or a local folder in the hub's layout.
        config: the dataset's config (subset) name, if it has several.
        split: which split.
        label: how errors name the dataset (default ``target``).
        recipe: the recipe being loaded, so the offline message names the right ``data prepare`` command.
        limit: only the first ``limit`` rows.
        preparing: called by ``data prepare`` (the offline message then says how to feed it a copy).
    """
    # lazy: datasets
    from datasets import disable_progress_bars, load_dataset

    label = label or str(target)
    disable_progress_bars()  # the training progress bar is the one that matters; errors still surface
    try:
        with _quiet_hub_logs():  # the hub client's retry warnings would bury the one-line error below
            data = load_dataset(str(target), config, split=split)
    except Exception as err:  # datasets raises many types; each becomes one line
        if _offline(err) and not Path(target).exists():
            raise CorlError(
                f"{label}: the Hugging Face hub is not reachable and the dataset is not cached; "
                f"{stage_hint(str(target), recipe, preparing=preparing)}"
            ) from None
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        if "split" in reason.lower() and "unknown" in reason.lower():
            raise CorlError(f"{label}: no split {split!r} ({reason})") from None
        raise CorlError(f"{label}: cannot load the dataset ({type(err).__name__}: {reason})") from None
    stop = len(data) if limit is None else min(limit, len(data))
    table = data.with_format("arrow")[:stop]  # raw Arrow: images stay encoded bytes, nothing is decoded
    return list(data.column_names), decode_json_columns(table)
