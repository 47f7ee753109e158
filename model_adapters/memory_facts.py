"""What ``corl-vl plan`` knows about one model, without loading weights or downloading anything.

For a real preset it reads the published config written in the repo (each family's ``full_size.py``), so
planning needs no download; for a local folder, its ``config.json``. The adapter does the reading
(:class:`~model_adapters.model_facts.MemoryFacts`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from corl_vl.errors import CorlError

from .model_facts import ModelFacts
from .presets import full_size_specs
from .registry import create_adapter


def memory_facts(
    model: str, *, adapter: str | None = None, adapter_kwargs: dict[str, Any] | None = None
) -> ModelFacts:
    """Facts for a preset name, a ``NAME@random``/``@width-only`` preset or a local checkpoint folder."""
    published = full_size_specs()
    spec = model if "@" in model or model not in published else f"{model}@random"
    if "@" not in spec and not Path(spec).is_dir() and not spec.startswith("tiny-"):
        raise CorlError(
            f"plan: no config for '{model}' without downloading; use a preset with a published size "
            f"({', '.join(published)}) or a local checkpoint folder"
        )
    kwargs = {k: v for k, v in (adapter_kwargs or {}).items() if k != "dtype"}
    return create_adapter(spec, adapter=adapter, **kwargs).memory_facts()
