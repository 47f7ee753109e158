"""Problems, datasets, paired views and the synthetic visual-math generator."""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "FieldMap": "corl_vl.data.datasets",
    "load_problems": "corl_vl.data.datasets",
    "open_image": "corl_vl.data.images",
    "load_paired_view": "corl_vl.data.paired",
    "verify_paired_views": "corl_vl.data.paired",
    "Problem": "corl_vl.data.problem",
    "generate_problems": "corl_vl.data.synth",
    "to_text_problem": "corl_vl.data.synth",
    "write_dataset": "corl_vl.data.synth",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    # resolved on first use: importing a light submodule (corl_vl.data.dataset_recipes, for `corl-vl --help`) must not
    # pull in Pillow, datasets and the image code
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'corl_vl.data' has no attribute '{name}'")
