"""What a checkpoint folder holds, read from its files without building the model (for CLI output and tests)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any


def count_parameters(path: str | Path) -> int:
    """Parameters stored in a checkpoint folder's safetensors (no model construction)."""
    from safetensors import safe_open  # lazy: torch

    total = 0
    for file in sorted(Path(path).glob("*.safetensors")):
        with safe_open(file, framework="pt") as f:
            for key in f.keys():  # noqa: SIM118 (safe_open is not a dict)
                total += math.prod(f.get_slice(key).get_shape())
    return total


def describe(path: str | Path) -> dict[str, Any]:
    """A short summary of a checkpoint folder (architecture and parameter count) for CLI output."""
    config = json.loads((Path(path) / "config.json").read_text())
    return {"architecture": (config.get("architectures") or ["?"])[0], "parameters": count_parameters(path)}
