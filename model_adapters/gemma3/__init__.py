"""Gemma-3: the adapter, its presets, its tiny recipe and its published full-size configs."""

from .adapter import Gemma3Adapter, zero_size_embedding_guard

__all__ = ["Gemma3Adapter", "zero_size_embedding_guard"]
