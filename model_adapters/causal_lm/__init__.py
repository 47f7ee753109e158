"""Text-only causal LMs: the adapter, its presets, its tiny recipes and its published full-size configs."""

from .adapter import CausalLMAdapter

__all__ = ["CausalLMAdapter"]
