"""Qwen3-VL mixture of experts: the adapter, its presets, its tiny recipe and its vLLM weight layout."""

from .adapter import Qwen3VLMoeAdapter

__all__ = ["Qwen3VLMoeAdapter"]
