"""The files a run reads, pinned in its record: relative paths become absolute before the run starts, so its
``config.yaml`` names the very files it trained on, wherever it is resumed from.

Why: ``data.train: problems.jsonl`` means a different file in another working directory. Resolved against the
current directory on resume, it silently trained on other problems (or on none). Now a new run records the
absolute path; a resume whose config still says ``problems.jsonl`` takes the file the record names when the
record's path ends with it (the same setting, written from another directory), and otherwise resolves it here,
where a different file is refused as a changed setting (:mod:`corl_vl.train.resume_check`).

A value that is not an existing file or folder here (``synthetic``, a recipe, a hub id) is left as written.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

FILE_KEYS = ("data.train", "eval.source", "reward.module", "distributed.deepspeed")  # and agents.N.data_view


def _keys(tree: Any) -> list[str]:
    agents = _get(tree, "agents")
    count = len(agents) if isinstance(agents, list) else 0
    return [*FILE_KEYS, *(f"agents.{i}.data_view" for i in range(count))]


def _get(tree: Any, key: str) -> Any:
    """``key``'s value in a config (dataclasses) or its record (dicts and lists); None when absent."""
    value = tree
    for part in key.split("."):
        if isinstance(value, dict):
            value = value.get(part)
        elif isinstance(value, list):
            value = value[int(part)] if part.isdigit() and int(part) < len(value) else None
        else:
            value = getattr(value, part, None)
    return value


def _put(tree: Any, key: str, value: str) -> None:
    *head, last = key.split(".")
    parent = _get(tree, ".".join(head))
    if isinstance(parent, dict):
        parent[last] = value
    else:
        setattr(parent, last, value)


def _split(key: str, value: str) -> tuple[str, str]:
    """(path, suffix): ``reward.module``'s ``file.py:function`` keeps its ``:function``."""
    if key == "reward.module":
        path, sep, attr = value.rpartition(":")
        if sep and path:
            return path, sep + attr
    return value, ""


def _recorded(saved: Any, key: str, path: Path) -> str | None:
    """The record's absolute path for the relative ``path`` when it ends with it and still exists."""
    if not isinstance(saved, str):
        return None
    full = Path(_split(key, saved)[0])
    if full.is_absolute() and full.parts[-len(path.parts) :] == path.parts and full.exists():
        return str(full)
    return None


def anchor_paths(tree: Any, record: dict[str, Any] | None = None, base: Path | None = None) -> Any:
    """Make the relative file settings of ``tree`` (a config, or a run record) absolute, in place: the
    ``record``'s file (a resume) when it names the same relative path, else ``base`` (default: the current
    directory) when the file exists there. Returns ``tree``."""
    here = Path.cwd() if base is None else base
    for key in _keys(tree):
        value = _get(tree, key)
        if not isinstance(value, str) or not value or value == "synthetic":
            continue
        text, suffix = _split(key, value)
        path = Path(text).expanduser()
        if path.is_absolute() or not path.parts:
            continue
        chosen = _recorded(_get(record, key), key, path)
        if chosen is None and (here / path).exists():
            chosen = str((here / path).resolve())
        if chosen is not None:
            _put(tree, key, chosen + suffix)
    return tree
