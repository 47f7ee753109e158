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
- :func:`os_error_line`: an ``OSError`` from writing (disk full, read-only, permission denied, a folder where a
  file should go, a file where a folder should go, a name too long) as one line that says what to do; the CLI
  prints it instead of a traceback.
- :func:`check_output_path`: the same mistakes in an output flag, refused before any work is done.
- :func:`check_regular_file`, :func:`read_text_file`, :func:`loads_json`: inputs that are not plain files (a FIFO
  or a device would block or never end), larger than any input here, not UTF-8, or JSON nested past Python's
  stack, each as one line naming the file.
"""

from __future__ import annotations

import errno
import json
import math
import os
import secrets
import shutil
import stat
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from corl_vl.errors import CorlError

#: Largest config or JSON document read whole (a YAML config is kilobytes; /dev/zero never ends).
MAX_TEXT_BYTES = 64 * 1024 * 1024
#: Largest JSON data file read whole (a benchmark dump or a dataset as one JSON array).
MAX_JSON_BYTES = 8 * 1024**3


def special_file_kind(path: str | Path) -> str | None:
    """``"a FIFO (named pipe)"`` or ``"a device or socket"`` for such a path; None for a plain file, a folder
    or a path that does not exist (its open reports that)."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return None
    if stat.S_ISDIR(mode) or stat.S_ISREG(mode):
        return None
    return "a FIFO (named pipe)" if stat.S_ISFIFO(mode) else "a device or socket"


def check_regular_file(path: str | Path, what: str = "file") -> None:
    """Refuse, before opening, a path that is a FIFO, socket or device: reading one may block forever or never
    end."""
    kind = special_file_kind(path)
    if kind is not None:
        raise CorlError(f"{path}: is {kind}, not a regular {what}; give a plain file")


def read_text_file(path: str | Path, what: str = "file", *, limit: int = MAX_TEXT_BYTES) -> str:
    """The UTF-8 text of a plain file of at most ``limit`` bytes; anything else is one :class:`CorlError` line.
    ``FileNotFoundError`` and ``IsADirectoryError`` pass through for the caller's own wording."""
    check_regular_file(path, what)
    with open(path, "rb") as fh:
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise CorlError(
            f"{path}: larger than {limit // 2**20} MiB, far more than any {what} here; check the path"
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise CorlError(
            f"{path}: not UTF-8 text ({err.reason} at byte {err.start}); save it as UTF-8"
        ) from None


def loads_json(text: str, where: str) -> Any:
    """``json.loads`` whose nesting past Python's stack is one line naming ``where``, not a RecursionError."""
    try:
        return json.loads(text)
    except RecursionError:
        raise CorlError(f"{where}: JSON nested too deeply to read (thousands of levels)") from None


def read_json_file(path: str | Path, field: str) -> Any:
    """The JSON value of the plain file a setting names (``field``, e.g. ``distributed.deepspeed``); a missing
    file, a FIFO or device, non-UTF-8, endless or invalid JSON is one :class:`CorlError` line naming both."""
    try:
        text = read_text_file(path, "JSON file")
    except CorlError as err:
        raise CorlError(f"{field}: {err}") from None
    except OSError as err:  # not found, a folder, no permission
        raise CorlError(f"{field}: cannot read {path} ({err.strerror or err})") from None
    try:
        return loads_json(text, f"{field}: {path}")
    except json.JSONDecodeError as err:
        raise CorlError(f"{field}: {path} is not valid JSON ({err.msg}, line {err.lineno})") from None


def check_answer_value(value: Any, where: str) -> Any:
    """``value`` if it is an answer a grader can read as text (a string, an integer, a finite number); anything
    else (true/false, NaN, infinity, a list, an object, null) is one :class:`CorlError` line naming ``where``
    (``file:row field 'answer'``): ``str()`` would turn it into a Python repr that is then graded as if meant."""
    if isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    if isinstance(value, float) and math.isfinite(value):
        return value
    got = f"{value}" if isinstance(value, float) else f"{_kind(value)} {json.dumps(value, default=str)[:40]}"
    raise CorlError(f"{where}: must be text or a finite number, got {got}; fix or drop the row")


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
    check_regular_file(path, what)
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
                line = raw.decode("utf-8").rstrip("\r\n")  # columns count within this line only
                if not line.strip():
                    continue
                row = json.loads(line)
                problem = None if isinstance(row, dict) else f"expected a JSON object, got {_kind(row)}"
            except RecursionError:
                problem = "JSON nested too deeply to read (thousands of levels)"
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
    block ends without an exception, removed in any case. Parent folders are created.

    A file-system error the user can fix (disk full, read-only, no permission, ``path`` is a folder) becomes a
    one-line :class:`CorlError` that names ``path``, not the temporary name."""
    path = Path(path)
    if path.is_dir():
        raise CorlError(f"{path}: is a folder, not a file; give a file path for this output")
    tmp = path.with_name(f".{path.name}.{os.getpid()}-{secrets.token_hex(4)}.tmp{path.suffix}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        yield tmp
        os.replace(tmp, path)
    except OSError as err:
        raise _writing_error(path, err, (tmp, path)) from None
    finally:
        _remove_quietly(tmp)


def _writing_error(target: Path, err: OSError, ours: tuple[Path, ...]) -> BaseException:
    """``err`` as a one-line CorlError about ``target`` when it is a fixable file-system error on one of our
    paths (an ``OSError`` about some other file, raised inside the block, is passed on as it is)."""
    names = [Path(n) for n in (err.filename, err.filename2) if n is not None]
    on_ours = not names or any(n == o or o in n.parents or n in o.parents for n in names for o in ours)
    hint = _ERRNO_HINTS.get(err.errno) if on_ours else None
    if hint is None:
        return err
    return CorlError(f"{target}: cannot write, {hint[0]}; {hint[1]} (nothing was written)")


def _remove_quietly(path: Path) -> None:
    """Best-effort cleanup: on a read-only or full disk it may fail too, and must not hide the first error."""
    try:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
    except OSError:
        pass


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
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    except OSError as err:
        raise _writing_error(out, err, (out,)) from None
    try:
        yield tmp / out.name
        replace_dir_atomic(tmp / out.name, out)
    except OSError as err:
        raise _writing_error(out, err, (tmp, out)) from None
    finally:
        _remove_quietly(tmp)


_ERRNO_HINTS = {
    errno.ENOSPC: ("no space left on the device", "free some space or pick another --output-dir"),
    errno.EDQUOT: ("disk quota exceeded", "free some space or pick another --output-dir"),
    errno.EROFS: ("read-only file system", "pick a writable --output-dir / --output"),
    errno.EACCES: ("permission denied", "pick a folder you can write to, or fix its permissions"),
    errno.EPERM: ("operation not permitted", "pick a folder you can write to, or fix its permissions"),
    errno.EISDIR: ("is a folder, not a file", "give a file path"),
    errno.ENOTDIR: ("a part of this path is a file, not a folder", "pick another path"),
    errno.EEXIST: ("a file is in the way of a folder this path needs", "remove it or pick another path"),
    errno.ENAMETOOLONG: (
        "a name in this path is too long (most file systems allow 255 bytes per name)",
        "use shorter names",
    ),
}


def check_output_path(path: str | Path, *, folder: bool, flag: str) -> None:
    """Refuse an output path that cannot be written before any work is done: ``folder`` outputs must not be an
    existing file, file outputs not an existing folder, and no existing part of the path may be a file."""
    path = Path(path)
    if folder and path.exists() and not path.is_dir():
        raise CorlError(f"{flag} {path}: is a file, not a folder; give a folder for the outputs")
    if not folder and path.is_dir():
        raise CorlError(f"{flag} {path}: is a folder, not a file; give a file path")
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                raise CorlError(f"{flag} {path}: {parent} is a file, not a folder; pick another path")
            break
    too_long = [part for part in path.parts if len(os.fsencode(part)) > 255]
    if too_long:
        raise CorlError(
            f"{flag}: the name {too_long[0][:40]}… is {len(os.fsencode(too_long[0]))} bytes long; most file "
            "systems allow 255 bytes per name, use a shorter one"
        )


#: Files that mark a folder as a ``datasets`` save_to_disk folder (the only folders ``--overwrite`` replaces).
DATASET_MARKERS = ("dataset_dict.json", "state.json")


def check_dataset_output(out: str | Path, *, overwrite: bool, flag: str = "--out") -> bool:
    """Whether ``out`` (a dataset folder to be written whole) may be written, refusing what would clobber files.

    Never replaced, even with ``--overwrite``: the current folder or one above it (``--out .`` would swap the
    whole working folder), the home folder, and anything that is not a dataset folder (a file, a folder of
    other files). An existing dataset folder needs ``--overwrite``; a missing or empty folder is written.
    Returns True when something is there to replace (an empty folder or, with ``overwrite``, a dataset).
    """
    out = Path(out)
    where = out.resolve()
    cwd = Path.cwd().resolve()
    if where == cwd or where in cwd.parents or where == Path.home().resolve():
        raise CorlError(
            f"{flag} {out}: is the current folder, one above it or the home folder; the dataset replaces its "
            f"folder whole, so give a new folder name (e.g. {flag} data/synth)"
        )
    if not os.path.lexists(out):
        return False
    if out.is_dir() and not out.is_symlink() and not any(out.iterdir()):
        return True  # an empty folder: nothing to lose
    if not (out.is_dir() and any((out / marker).exists() for marker in DATASET_MARKERS)):
        raise CorlError(
            f"{flag} {out}: exists and is not a dataset folder (no {DATASET_MARKERS[0]}); it is never replaced "
            "(not even with --overwrite), so pick a new name or remove it yourself"
        )
    if not overwrite:
        raise CorlError(f"{flag} {out}: already exists (use --overwrite to replace it)")
    return True


def os_error_line(err: OSError) -> str | None:
    """One line for a file-system error the user can fix (None for any other ``OSError``)."""
    hint = _ERRNO_HINTS.get(err.errno)
    if hint is None:
        return None
    what, todo = hint
    where = err.filename if err.filename is not None else None
    return f"{where}: {what}; {todo}" if where else f"{what}; {todo}"
