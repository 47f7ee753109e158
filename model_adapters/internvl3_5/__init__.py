"""InternVL3.5 (HF format): the adapter, its presets, its tiny recipe and its published full-size configs."""

from .adapter import InternVL35Adapter

__all__ = ["InternVL35Adapter"]
