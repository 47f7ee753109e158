"""Rollout engines behind one protocol (:class:`~corl_vl.rollout.base.RolloutEngine`), by name in :data:`ENGINES`.

A new engine is one factory in the table (``rollout.engine`` is validated against its names, plus ``auto``:
:func:`resolve_engine` picks per model size).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Mapping
from typing import Any

from corl_vl.errors import CorlError
from corl_vl.rollout.base import Completion, Rollout, RolloutEngine, cut_at_stop
from corl_vl.rollout.vllm_engine import VLLMEngine

__all__ = [
    "ENGINES",
    "Completion",
    "Rollout",
    "RolloutEngine",
    "check_one_vllm_engine_per_process",
    "create_engine",
    "cut_at_stop",
    "parameter_count",
    "resolve_engine",
]


def _hf(adapter: Any, model: Any, **options: Any) -> RolloutEngine:
    """Samples from the trainer's own model object."""
    # lazy: PIL, numpy, tokenizers, torch, transformers (only when an engine is built)
    from corl_vl.rollout.hf import HFEngine

    return HFEngine(adapter, model, batch_size=options.get("batch_size", 16))


def _vllm(adapter: Any, model: Any, **options: Any) -> RolloutEngine:
    """A separate vLLM engine kept in sync with the trainer's weights."""
    return VLLMEngine(adapter, **options)


# name → factory(adapter, trainer model, **options)
ENGINES: dict[str, Callable[..., RolloutEngine]] = {"hf": _hf, "vllm": _vllm}


def create_engine(kind: str, adapter: Any, model: Any, **options: Any) -> RolloutEngine:
    if kind not in ENGINES:
        raise CorlError(f"rollout.engine must be one of {', '.join(ENGINES)}, got '{kind}'")
    return ENGINES[kind](adapter, model, **options)


def parameter_count(model: Any) -> int:
    """Parameters of ``model``, also when DeepSpeed ZeRO-3 has partitioned them (``ds_numel``)."""
    return sum(int(getattr(p, "ds_numel", 0) or p.numel()) for p in model.parameters())


def resolve_engine(kind: str, model: Any, *, vllm_min_params: int) -> tuple[str, str]:
    """The engine to build for ``rollout.engine: kind`` and why, in words for the log.

    ``auto``: vLLM when it is installed and ``model`` has at least ``vllm_min_params`` parameters, else HF.
    Why by size: vLLM's rollouts are faster at every size measured on CPU, but its start-up (~10 s per agent
    there), its weight sync every step and its second copy of the weights only pay for themselves once each
    step saves enough; below the size that takes longer than a short run (``benchmarks/perf/README.md``).
    """
    if kind != "auto":
        return kind, "rollout.engine"
    params = parameter_count(model)
    size = f"{params / 1e6:.1f} M parameters"
    if params < vllm_min_params:
        return "hf", f"auto: {size} < rollout.vllm_min_params = {vllm_min_params / 1e6:g} M"
    if importlib.util.find_spec("vllm") is None:
        return "hf", f"auto: {size}, but vLLM is not installed (pip install 'corl-vl[gpu]' or '[cpu]')"
    return "vllm", f"auto: {size} ≥ rollout.vllm_min_params = {vllm_min_params / 1e6:g} M"


def planned_engine(kind: str, adapter: Any, *, vllm_min_params: int) -> str:
    """:func:`resolve_engine`'s choice before the model loads, from the parameter count its config gives
    (``adapter.memory_facts``); ``"unknown"`` when the family cannot say (the choice is then made at build)."""
    if kind != "auto":
        return kind
    try:
        params = adapter.memory_facts().parameters
    except Exception:  # a plug-in family without memory facts: decided once its model is loaded
        return "unknown"
    if params < vllm_min_params or importlib.util.find_spec("vllm") is None:
        return "hf"
    return "vllm"


def check_one_vllm_engine_per_process(kinds: Mapping[str, str], device_type: str) -> None:
    """Refuse, before any model loads, a process that would hold two vLLM engines on a GPU.

    ``kinds``: agent name → the engine it will use (``"vllm"``/``"hf"``, resolved) for the agents of *this*
    process; ``device_type``: its torch device type. Why: vLLM's sleep allocator (``CuMemAllocator``) is one per
    process and every engine's sleep walks all its allocations, so one agent's sleep would free the other's
    weights and KV cache (and an awake engine leaves the next too little free memory to start).
    """
    users = [name for name, kind in kinds.items() if kind == "vllm"]
    if device_type == "cuda" and len(users) > 1:
        raise CorlError(
            f"agents {users[0]} and {users[1]} both use vLLM in one process: vLLM's sleep allocator is one per "
            "process; launch one process per agent (the default on GPUs), or set rollout.engine: hf"
        )
