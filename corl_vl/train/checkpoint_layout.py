"""Where each part of a checkpoint lives, and ``meta.json`` read as untrusted input.

Why a module of its own: the layout is read by three places (resume, ``eval --model RUN``, ``diagnose``) and a
checkpoint is a file someone may have copied, cut short or edited. Each agent's model folder holds only what
``from_pretrained`` and vLLM load (vLLM reads every ``*.safetensors`` in it, so optimizer state there breaks it);
the training state lives beside it under ``state/<agent>/``. Checkpoints of format 1 and 2 kept that state inside
the agent folder and are still read from there.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from corl_vl.errors import CorlError

FORMAT = (
    3  # 1: pickled *.pt state; 2: safetensors + JSON inside the agent folder; 3: state/<agent>/ beside it
)
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
