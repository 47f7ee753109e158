"""A folder whose writes fail like a full, read-only or forbidden disk (tests/test_faults.py).

Where the machine allows it (root, ``mount -t tmpfs`` works) a full disk is a real, small tmpfs filled to the
brim, and a read-only one a tmpfs mounted read-only. Elsewhere — and for "permission denied", which root never
gets from file modes — the writers Python and the libraries use are patched to raise the same ``OSError`` for
any path under the folder: ``open`` in a writing mode, ``os.open`` with write flags, ``mkdir``, ``rename`` /
``replace``, and the safetensors writer (whose Rust code bypasses Python's ``open``).
"""

from __future__ import annotations

import builtins
import errno
import io
import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC


def tmpfs_works() -> bool:
    """Whether this process may mount a tmpfs (root on Linux, mount available)."""
    if os.name != "posix" or os.geteuid() != 0 or shutil.which("mount") is None:
        return False
    probe = Path(f"/tmp/corl-tmpfs-probe-{uuid.uuid4().hex[:8]}")
    probe.mkdir()
    try:
        ok = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(probe)], capture_output=True
        )
        if ok.returncode != 0:
            return False
        subprocess.run(["umount", str(probe)], check=True)
        return True
    finally:
        probe.rmdir()


@contextmanager
def tmpfs(where: Path, size: str) -> Iterator[Path]:
    where.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], check=True)
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def fill(folder: Path) -> None:
    """Write zeros into ``folder`` until its file system is full."""
    with open(folder / "filler", "wb") as fh:
        try:
            while True:
                fh.write(b"\0" * (1 << 16))
                fh.flush()
        except OSError as err:
            assert err.errno == errno.ENOSPC, err


def _under(path: object, root: Path) -> bool:
    try:
        p = Path(os.fsdecode(path)).absolute()  # type: ignore[arg-type]
    except TypeError:
        return False
    return p == root or root in p.parents


def patch_writes(monkeypatch: pytest.MonkeyPatch, root: Path, code: int, *, mkdir: bool = True) -> None:
    """Every write under ``root`` raises ``OSError(code)`` (``mkdir=False``: folders may still be created, as
    on a full disk)."""
    root = root.absolute()

    def fail(path: object) -> OSError:
        return OSError(code, os.strerror(code), os.fsdecode(path))  # type: ignore[arg-type]

    real_open, real_os_open = builtins.open, os.open

    def fake_open(file, mode="r", *args, **kwargs):
        if any(c in mode for c in "wax+") and _under(file, root):
            raise fail(file)
        return real_open(file, mode, *args, **kwargs)

    def fake_os_open(path, flags, *args, **kwargs):
        if flags & _WRITE_FLAGS and _under(path, root):
            raise fail(path)
        return real_os_open(path, flags, *args, **kwargs)

    def guard(real):
        def wrapper(*args, **kwargs):
            for arg in args[:2]:
                if _under(arg, root):
                    raise fail(arg)
            return real(*args, **kwargs)

        return wrapper

    def fake_save_file(tensors, filename, *args, **kwargs):
        if _under(filename, root):
            raise fail(filename)
        return real_save_file(tensors, filename, *args, **kwargs)

    import safetensors.torch
    import transformers.modeling_utils

    real_save_file = safetensors.torch.save_file
    monkeypatch.setattr(builtins, "open", fake_open)
    monkeypatch.setattr(io, "open", fake_open)
    monkeypatch.setattr(os, "open", fake_os_open)
    for name in ("replace", "rename"):
        monkeypatch.setattr(os, name, guard(getattr(os, name)))
    if mkdir:
        real_mkdir = os.mkdir

        def fake_mkdir(path, *args, **kwargs):
            if _under(path, root) and not os.path.exists(
                path
            ):  # an existing folder: EEXIST, as on a real disk
                raise fail(path)
            return real_mkdir(path, *args, **kwargs)

        monkeypatch.setattr(os, "mkdir", fake_mkdir)
    monkeypatch.setattr(safetensors.torch, "save_file", fake_save_file)
    if hasattr(transformers.modeling_utils, "safe_save_file"):
        monkeypatch.setattr(transformers.modeling_utils, "safe_save_file", fake_save_file)
