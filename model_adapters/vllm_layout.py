"""Weights in the layout vLLM's loaders read: ``save_pretrained``'s tensors passed through the adapter's
:meth:`~model_adapters.vllm_requests.VLLMRequests.vllm_weights` hook, in memory or in a saved folder.

A folder is rewritten shard by shard, and only the shards the hook changes (identity for most families), so the
common case costs one read of the shards.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any


def hooked_weights(adapter: Any, weights: Iterable[tuple[str, Any]]) -> list[tuple[str, Any]]:
    """``weights`` (checkpoint-format names) as the adapter says vLLM reads them."""
    return [pair for name, tensor in weights for pair in adapter.vllm_weights(name, tensor)]


def apply_to_folder(folder: str | Path, adapter: Any | None = None) -> None:
    """Rewrite the ``*.safetensors`` shards of a ``save_pretrained`` folder through the hook of ``adapter`` (by
    default the adapter detected from the folder's config), and the shard index when names change."""
    from safetensors import safe_open
    from safetensors.torch import load_file, save_file

    from corl_vl.io import atomic_file, write_text_atomic

    folder = Path(folder)
    if adapter is None:
        from .registry import create_adapter

        adapter = create_adapter(folder)
    for shard in sorted(folder.glob("*.safetensors")):
        tensors = load_file(shard)
        hooked = hooked_weights(adapter, tensors.items())
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
