"""Weights in the layout vLLM's loaders read: ``save_pretrained``'s tensors passed through a family's weight hook
(an adapter's :meth:`~model_adapters.vllm_requests.VLLMRequests.vllm_weights`, or a tiny recipe's), in memory or in
a saved folder.

A folder is rewritten shard by shard, and only the shards the hook changes (identity for most families), so the
common case costs one read of the shards.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from corl_vl.io import atomic_file, write_text_atomic

WeightsHook = Callable[
    [str, Any], Iterable[tuple[str, Any]]
]  # (name, tensor) → the (name, tensor) pairs vLLM reads


def hooked_weights(hook: WeightsHook, weights: Iterable[tuple[str, Any]]) -> list[tuple[str, Any]]:
    """``weights`` (checkpoint-format names) as ``hook`` (e.g. ``adapter.vllm_weights``) says vLLM reads them."""
    return [pair for name, tensor in weights for pair in hook(name, tensor)]


def apply_to_folder(folder: str | Path, hook: WeightsHook) -> None:
    """Rewrite the ``*.safetensors`` shards of a ``save_pretrained`` folder through ``hook`` (e.g.
    ``adapter.vllm_weights``), and the shard index when names change."""
    # lazy: safetensors
    from safetensors import safe_open  # safetensors.torch imports torch: only when a folder is rewritten
    from safetensors.torch import load_file, save_file  # lazy: torch

    folder = Path(folder)
    for shard in sorted(folder.glob("*.safetensors")):
        tensors = load_file(shard)
        hooked = hooked_weights(hook, tensors.items())
        if len(hooked) == len(tensors) and all(tensors.get(n) is t for n, t in hooked):
            continue
        with safe_open(shard, framework="pt") as f:
            metadata = f.metadata()
        with atomic_file(shard) as tmp:
            save_file({n: t.contiguous() for n, t in hooked}, tmp, metadata=metadata)
        index = folder / "model.safetensors.index.json"
        if index.exists() and {n for n, _ in hooked} != set(tensors):
            data = json.loads(index.read_text())
            kept = {n: f for n, f in data["weight_map"].items() if n not in tensors}
            data["weight_map"] = {**kept, **{n: shard.name for n, _ in hooked}}
            write_text_atomic(index, json.dumps(data, indent=2))
