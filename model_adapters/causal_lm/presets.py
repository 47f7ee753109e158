"""The text-only presets (Qwen2.5, Llama-3.x, Qwen3) and the three tiny zoo models."""

from __future__ import annotations

from model_adapters.presets import Preset

from .full_size import FULL_SIZE
from .tiny import TINY_LLAMA3, TINY_QWEN2, TINY_QWEN3


def _real(name: str, hub_id: str, description: str) -> Preset:
    return Preset(name, "causal_lm", hub_id, description=description, full_size=FULL_SIZE.get(name))


PRESETS = (
    _real("qwen2.5-3b", "Qwen/Qwen2.5-3B-Instruct", "Qwen2.5 3B instruct (text)"),
    _real("qwen2.5-7b", "Qwen/Qwen2.5-7B-Instruct", "Qwen2.5 7B instruct (text)"),
    _real("llama-3.2-3b-instruct", "meta-llama/Llama-3.2-3B-Instruct", "Llama-3.2 3B (text)"),
    _real("llama-3.1-8b-instruct", "meta-llama/Llama-3.1-8B-Instruct", "Llama-3.1 8B (text)"),
    _real("qwen3-1.7b", "Qwen/Qwen3-1.7B", "Qwen3 1.7B (text)"),
    Preset("tiny-qwen2.5", "causal_lm", tiny=TINY_QWEN2, description="random tiny Qwen2 text model (tests)"),
    Preset(
        "tiny-llama3", "causal_lm", tiny=TINY_LLAMA3, description="random tiny Llama-3 text model (tests)"
    ),
    Preset("tiny-qwen3", "causal_lm", tiny=TINY_QWEN3, description="random tiny Qwen3 text model (tests)"),
)
