"""Qwen2.5-VL: the adapter, its presets, its tiny recipe and its published full-size configs."""

from .adapter import Qwen25VLAdapter

__all__ = ["Qwen25VLAdapter"]
