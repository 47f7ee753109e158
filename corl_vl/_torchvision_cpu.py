"""CPU-only import hook that lets torchvision's *Python* side import beside a CPU torch.

Why: PyPI only has CUDA builds of torchvision 0.28 (the match for torch 2.13). Beside ``torch==2.13.0+cpu`` its
C++ library does not load, and ``import torchvision`` then dies in ``torchvision/_meta_registrations.py`` with
``operator torchvision::nms does not exist``. the vision utility packages, timm, transformers' full (video-capable)
processors and vLLM's vision-model paths all import torchvision, so a broken torchvision breaks them all.

The only thing torchvision needs at import time is that the ``torchvision::nms`` and ``torchvision::qnms``
operator *schemas* exist (it registers fake/meta kernels for them). This hook defines those two schemas just
before torchvision is imported; its transforms (pure Python/torch) then work, while its C++ kernels (nms,
roi_align, ...) stay unavailable and fail loudly if called — corl-vl never calls them.

It is activated only by the CPU profile of ``scripts/install.sh`` (a ``.pth`` file in the venv), never on a GPU
install, where torchvision's own library loads and defines these operators itself.
"""

from __future__ import annotations

import importlib.abc
import sys

_SCHEMAS = {
    "nms": "nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "qnms": "qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
}
_LIBRARY = None  # kept alive: a torch.library.Library unregisters its definitions when collected


def define_missing_schemas() -> list[str]:
    """Define the torchvision operator schemas that are missing; returns the names defined."""
    global _LIBRARY
    # lazy: torch
    import torch

    missing = []
    for name in _SCHEMAS:
        try:
            getattr(torch.ops.torchvision, name)
        except (AttributeError, RuntimeError):
            missing.append(name)
    if missing:
        _LIBRARY = _LIBRARY or torch.library.Library("torchvision", "FRAGMENT")
        for name in missing:
            _LIBRARY.define(_SCHEMAS[name])
    return missing


class _BeforeTorchvision(importlib.abc.MetaPathFinder):
    """Runs :func:`define_missing_schemas` once, right before the first ``import torchvision``."""

    def find_spec(self, fullname, path, target=None):
        if fullname == "torchvision":
            sys.meta_path.remove(self)
            define_missing_schemas()
        return None  # the regular finders do the actual import


def install() -> None:
    """Register the hook (idempotent). Called from the venv's ``.pth`` file on CPU installs."""
    if "torchvision" in sys.modules or any(isinstance(f, _BeforeTorchvision) for f in sys.meta_path):
        return
    sys.meta_path.insert(0, _BeforeTorchvision())
