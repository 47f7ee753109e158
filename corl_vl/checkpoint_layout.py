"""Where each part of a checkpoint lives, and ``meta.json`` read as untrusted input.

Why a module of its own, outside ``corl_vl.train``: the layout is read by three places (resume, ``eval --model
RUN``, ``diagnose``), the second in ``corl_vl.eval``, which the trainer imports; and a
checkpoint is a file someone may have copied, cut short or edited. Each agent's model folder holds only what
``from_pretrained`` and vLLM load (vLLM reads every ``*.safetensors`` in it, so optimizer state there breaks it);
the training state lives beside it under ``state/<agent>/``. Checkpoints of format 1 and 2 kept that state inside
the agent folder and are still read from there. The run's ``checkpoints/`` folder is kept here too: which
checkpoint ``latest`` names, what ``train.save_total_limit`` prunes, what an interrupted save left behind.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
from pathlib import Path
from typing import Any

from corl_vl.errors import CorlError
from corl_vl.io import write_text_atomic

CHECKPOINTS = "checkpoints"

# 1: pickled *.pt state; 2: safetensors + JSON inside the agent folder; 3: state/<agent>/ beside it
FORMAT = 3
STATE = "state"
_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]*")  # a path component that stays inside its folder


def agent_state_folder(checkpoint: str | Path, agent: str, fmt: int) -> Path:
    """The folder with ``agent``'s training state (optimizer, scheduler, DeepSpeed partitions)."""
    checkpoint = Path(checkpoint)
    return checkpoint / STATE / agent if fmt >= 3 else checkpoint / agent


def read_meta(checkpoint: str | Path) -> dict[str, Any]:
    """``checkpoint/meta.json`` checked before any path is built from it: a JSON object whose ``agents`` is a
    non-empty list of unique plain names and whose ``step`` is a non-negative integer."""
    path = Path(checkpoint) / "meta.json"
    if not path.is_file():
        raise CorlError(f"{checkpoint}: not a complete checkpoint (no meta.json)")
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, OSError) as err:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise CorlError(f"{path}: not readable JSON ({err}); the checkpoint is damaged") from None
    if not isinstance(meta, dict):
        raise CorlError(f"{path}: expected a JSON object with 'step' and 'agents'; the checkpoint is damaged")
    agents = meta.get("agents")
    if not isinstance(agents, list) or not agents:
        raise CorlError(f"{path}: no 'agents' list (the agent names); the checkpoint is damaged")
    for name in agents:
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise CorlError(
                f"{path}: agent name {name!r} is not a plain folder name ([A-Za-z0-9._-], no leading dot); "
                "refusing to build a path from it"
            )
    if len(set(agents)) != len(agents):
        raise CorlError(f"{path}: agent names repeat ({', '.join(agents)}); the checkpoint is damaged")
    step = meta.get("step")
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise CorlError(
            f"{path}: 'step' must be a non-negative integer, got {step!r}; the checkpoint is damaged"
        )
    fmt = meta.get("format", 1)
    if isinstance(fmt, bool) or not isinstance(fmt, int) or not 1 <= fmt <= FORMAT:
        raise CorlError(
            f"{path}: unknown checkpoint format {fmt!r} (this version reads 1–{FORMAT}); upgrade corl-vl"
        )
    return meta


# ------------------------------------------------------------------ the run's checkpoints folder
def point_latest(root: Path, name: str) -> None:
    """Make ``root/latest`` point at checkpoint ``name``: a relative directory symlink swapped in with
    ``os.replace`` (readers see the old link or the new one), else the name in a text file."""
    link = root / "latest"
    tmp = root / f".latest.{os.getpid()}-{secrets.token_hex(4)}"
    try:
        os.symlink(name, tmp, target_is_directory=True)
    except (OSError, NotImplementedError):  # no symlinks here (some network / Windows file systems)
        if link.is_symlink():
            link.unlink()
        write_text_atomic(link, name)
        return
    try:
        os.replace(tmp, link)
    except OSError:
        tmp.unlink(missing_ok=True)
        raise


def prune_checkpoints(run_dir: str | Path, keep: int) -> list[Path]:
    """``train.save_total_limit``: delete all but the newest ``keep`` complete checkpoints, never the one
    ``latest`` points to nor the one ``best`` names; returns what was deleted."""
    root = Path(run_dir) / CHECKPOINTS
    done = sorted(p for p in root.glob("step-*") if (p / "meta.json").exists()) if root.is_dir() else []
    protected = {latest_checkpoint(run_dir)}
    if (root / "best").is_file():
        protected.add(root / (root / "best").read_text().strip())
    doomed = [p for p in done[:-keep] if p not in protected] if keep else []
    for path in doomed:
        shutil.rmtree(path)
    return doomed


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    """The newest complete checkpoint of a run (its ``step-*`` folder, not the ``latest`` link), or None; a
    :class:`CorlError` if its ``meta.json`` is damaged."""
    root = Path(run_dir) / CHECKPOINTS
    pointer = root / "latest"
    name = None
    if pointer.is_symlink():
        name = Path(os.readlink(pointer)).name
    elif pointer.is_file():  # runs saved before ``latest`` became a link, or without symlink support
        name = pointer.read_text().strip()
    if name and (root / name / "meta.json").exists():
        found: Path | None = root / name
    else:
        done = sorted(p for p in root.glob("step-*") if (p / "meta.json").exists()) if root.exists() else []
        found = done[-1] if done else None
    if found is not None:
        read_meta(found)  # a damaged meta.json is refused here, before any model loads
    return found


def remove_stale_temps(run_dir: str | Path) -> list[Path]:
    """Delete what interrupted saves left in ``RUN_DIR/checkpoints`` (hidden ``.step-*.tmp*`` folders, folders
    moved aside while being replaced, ``latest`` temp files); returns what was removed.

    Only call it when no save of this run is in progress (at the start of a run, on the main process).
    """
    root = Path(run_dir) / CHECKPOINTS
    if not root.is_dir():
        return []
    stale = [p for p in root.glob(".*") if p.name.startswith((".step-", ".latest."))]
    for p in stale:
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p, ignore_errors=True)
        else:
            p.unlink(missing_ok=True)
    return stale
