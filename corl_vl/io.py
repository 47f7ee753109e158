"""Reading JSONL and writing files and folders atomically, in one place.

Why: answers, responses, gold files, caches and annotation files are all JSONL, and a bad line must become one
:class:`~corl_vl.errors.CorlError` line that names ``file:line`` — not a traceback, and not a slightly different
message in every reader. Every output (results, graded files, datasets, checkpoints) must appear whole or not at
all, so that an interrupted run never leaves half a file that looks complete: it is written under a temporary
name in the same folder and renamed into place. (This protects against the process dying; there is no fsync,
so a power cut may still lose the newest write.)

- :func:`read_jsonl`: ``[(line number, object)]``; blank lines skipped.
- :func:`write_text_atomic`, :func:`write_jsonl_atomic`, :func:`atomic_file`: one file.
- :func:`atomic_dir`, :func:`replace_dir_atomic`: a whole folder (a dataset, a checkpoint).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from corl_vl.errors import CorlError


def _kind(value: Any) -> str:
    """A JSON value's kind in JSON's words (for "expected a JSON object, got …")."""
    kinds = {list: "an array", str: "a string", int: "a number", float: "a number", bool: "true/false"}
    return kinds.get(type(value), "null")


def read_jsonl(
    path: str | Path,
    *,
    what: str = "file",
    skip_bad: bool = False,
) -> list[tuple[int, dict[str, Any]]]:
    """The objects of a JSONL file with their 1-based line numbers; blank lines are skipped.

    A missing or unreadable file, a line that is not UTF-8 or not JSON, or a line that is not a JSON object
    raises :class:`CorlError` with one line: ``"{path}: no such {what}"``, or ``"{path}:{lineno}: "`` followed
    by the problem, e.g. ``"answers.jsonl:3: invalid JSON (…)"``. ``skip_bad=True`` drops bad lines instead
    (a cache whose last line an interrupted run cut off).
    """
    path = Path(path)
    try:
        fh = path.open("rb")
    except FileNotFoundError:
        raise CorlError(f"{path}: no such {what}") from None
    except OSError as err:
        raise CorlError(f"{path}: cannot read {what} ({err.strerror or err})") from None
    rows: list[tuple[int, dict[str, Any]]] = []
    with fh:
        for lineno, raw in enumerate(fh, 1):  # split on b"\n" only: U+2028 may stand raw inside a string
            try:
                line = raw.decode("utf-8")
                if not line.strip():
                    continue
                row = json.loads(line)
                problem = None if isinstance(row, dict) else f"expected a JSON object, got {_kind(row)}"
            except UnicodeDecodeError as err:
                problem = f"not UTF-8 text ({err.reason})"
            except json.JSONDecodeError as err:
                problem = f"invalid JSON ({err.msg} at column {err.colno})"
            if problem is None:
                rows.append((lineno, row))
            elif not skip_bad:
                raise CorlError(f"{path}:{lineno}: {problem}")
    return rows


@contextmanager
def atomic_file(path: str | Path) -> Iterator[Path]:
    """A temporary path beside ``path`` (same suffix) to write the new file at; renamed onto ``path`` when the
    block ends without an exception, removed in any case. Parent folders are created."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}-{secrets.token_hex(4)}.tmp{path.suffix}")
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_text_atomic(path: str | Path, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path``: readers see the old file or the complete new one."""
    with atomic_file(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def write_jsonl_atomic(path: str | Path, rows: Iterable[Mapping[str, Any]]) -> None:
    """Write one JSON object per line (UTF-8, non-ASCII kept) to ``path`` atomically.

    A row that cannot be serialised raises before anything is renamed: the old file stays as it was.
    """
    with atomic_file(path) as tmp, tmp.open("w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")


def replace_dir_atomic(new: str | Path, out: str | Path) -> None:
    """Rename ``new`` (a folder, or a file) to ``out``, replacing what is there.

    A file replacing a file (or anything moving to a free name) is one ``os.replace``. Otherwise (a folder is
    involved, which ``os.replace`` cannot swap) the old ``out`` is moved aside into a hidden sibling, ``new``
    is renamed in, then the old one is removed; if renaming ``new`` fails, the old one is put back.
    """
    new, out = Path(new), Path(out)
    if not os.path.lexists(out) or not (out.is_dir() or new.is_dir()):
        os.replace(new, out)
        return
    aside = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
    old = aside / out.name
    try:
        out.rename(old)
    except BaseException:
        aside.rmdir()
        raise
    try:
        new.rename(out)
    except BaseException:
        old.rename(out)
        aside.rmdir()
        raise
    shutil.rmtree(aside, ignore_errors=True)


@contextmanager
def atomic_dir(out: str | Path) -> Iterator[Path]:
    """A not-yet-existing path inside a hidden temporary folder beside ``out``: create the new folder (or file)
    there; when the block ends without an exception it replaces ``out`` (:func:`replace_dir_atomic`). The
    temporary folder is removed in any case."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        yield tmp / out.name
        replace_dir_atomic(tmp / out.name, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
