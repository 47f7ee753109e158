"""A KV cache for HF ``generate`` that appends into spare room instead of copying itself at every token.

Why: HF's ``DynamicLayer`` grows by ``torch.cat`` — every decode step copies the whole cache (prompt included)
into a new tensor, O(T²) bytes per sequence. With the paper's 1,347-token VL prompts that copy is ~15 % of a
rollout on a CPU (``benchmarks/perf/README.md``). :class:`GrowingLayer` keeps a buffer with room to spare,
writes each step's keys and values into it, and hands attention views of the filled part; the buffer grows
by half when full (amortised O(1) per token), so the cache holds at most ~1.5× the tokens it has.

The views hold the very values ``torch.cat`` would have produced. Every other layer operation (row selection,
cropping, repeating) stays HF's: it replaces the tensors, and the next ``update`` notices they are no longer
views of the buffer and starts a new one from them.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers.cache_utils import DynamicCache, DynamicLayer

SPARE = 64  # tokens of room beyond the half: short prompts do not regrow at once


class GrowingLayer(DynamicLayer):
    """:class:`~transformers.cache_utils.DynamicLayer` whose ``update`` writes into spare room (module doc)."""

    def __init__(self) -> None:
        super().__init__()
        self._buffers: tuple[torch.Tensor, torch.Tensor] | None = None

    def _filled_views(self) -> bool:
        """Whether ``keys``/``values`` are still the filled part of this layer's buffers."""
        if self._buffers is None or self.keys is None or self.keys.dim() != 4:
            return False
        k, v = self._buffers
        n = self.keys.shape[-2]
        return all(
            t.data_ptr() == b.data_ptr() and t.shape == b[..., :n, :].shape and t.stride() == b.stride()
            for t, b in ((self.keys, k), (self.values, v))
        )

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        filled = self._filled_views()
        n = self.keys.shape[-2] if self.keys.dim() == 4 else 0
        need = n + key_states.shape[-2]
        if not filled or need > self._buffers[0].shape[-2]:
            room = need + need // 2 + SPARE
            fresh = []
            for old, new in ((self.keys, key_states), (self.values, value_states)):
                buffer = new.new_empty(*new.shape[:2], room, new.shape[-1])
                if n:
                    buffer[..., :n, :] = old
                fresh.append(buffer)
            self._buffers = (fresh[0], fresh[1])
        k, v = self._buffers
        k[..., n:need, :] = key_states
        v[..., n:need, :] = value_states
        self.keys, self.values = k[..., :need, :], v[..., :need, :]
        return self.keys, self.values

    def reset(self) -> None:
        self._buffers = None
        super().reset()


def growing_cache(model: Any) -> DynamicCache:
    """``generate``'s default cache for ``model`` with each plain full-attention layer a :class:`GrowingLayer`
    (sliding-window layers keep HF's: they drop old tokens anyway)."""
    cache = DynamicCache(config=model.config)
    cache.layers = [GrowingLayer() if type(layer) is DynamicLayer else layer for layer in cache.layers]
    return cache
