"""Folders whose weights are built from their config, seeded (the ``NAME@random`` / ``@width-only`` presets).

Why apart from :mod:`model_adapters.full_size`: loading such a folder is part of every adapter
(:meth:`~model_adapters.base.ModelAdapter.load_model`), writing one is a builder's job; the adapter side needs
only the marker and the family's fix-up after random init.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

RANDOM_MARKER = "corl_random_init.json"  # in a checkpoint folder: weights are built from config, not loaded


def random_init_record(model_path: str | Path) -> dict[str, Any] | None:
    """The marker of a random full-size folder, or None for a real checkpoint."""
    marker = Path(model_path) / RANDOM_MARKER
    if not marker.is_file():
        return None
    return json.loads(marker.read_text())


class RandomInit:
    """Mixed into :class:`~model_adapters.base.ModelAdapter`: random weights of a marked folder's architecture."""

    def init_random_weights(self, model: Any) -> None:
        """Family hook: fix-ups after random init, inside the seeded block (Gemma-3 draws the projection from
        vision to text, which it zero-initialises). The tiny zoo's recipes call the same function."""

    def build_random_model(self, auto: Any, *, dtype: Any, device: str, **kwargs: Any) -> Any:
        """Random weights of the folder's architecture, created directly on ``device`` in ``dtype`` (seeded)."""
        # lazy: torch, transformers
        import torch  # heavy: only when weights are built
        from transformers import AutoConfig  # lazy: transformers

        record = random_init_record(self.model_path) or {}  # type: ignore[attr-defined]
        config = AutoConfig.from_pretrained(self.model_path)  # type: ignore[attr-defined]
        with torch.random.fork_rng(devices=[]), torch.device(device):
            torch.manual_seed(int(record.get("seed", 0)))
            model = auto.from_config(config, dtype=dtype, **kwargs)
            self.init_random_weights(model)
        return model
