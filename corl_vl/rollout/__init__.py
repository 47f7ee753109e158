"""Rollout engines behind one protocol (:class:`~corl_vl.rollout.base.RolloutEngine`)."""

from __future__ import annotations

from typing import Any

from corl_vl.errors import CorlError
from corl_vl.rollout.base import Completion, Rollout, RolloutEngine, cut_at_stop

__all__ = ["Completion", "Rollout", "RolloutEngine", "create_engine", "cut_at_stop"]


def create_engine(kind: str, adapter: Any, model: Any, **options: Any) -> RolloutEngine:
    """``hf`` (samples from the trainer's own model object) or ``vllm`` (a separate engine kept in sync)."""
    if kind == "hf":
        from corl_vl.rollout.hf import HFEngine

        return HFEngine(adapter, model, batch_size=options.get("batch_size", 16))
    if kind == "vllm":
        from corl_vl.rollout.vllm_engine import VLLMEngine

        return VLLMEngine(adapter, **options)
    raise CorlError(f"rollout.engine must be 'hf' or 'vllm', got '{kind}'")
