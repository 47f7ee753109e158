"""Qwen3-VL (dense sizes): the adapter, its presets and its tiny recipe."""

from .adapter import Qwen3VLAdapter

__all__ = ["Qwen3VLAdapter"]
