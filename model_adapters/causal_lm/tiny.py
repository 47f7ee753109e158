"""The tiny text models of the zoo (Qwen2.5, Llama-3, Qwen3), built by :mod:`model_adapters.tiny`."""

from __future__ import annotations

from typing import Any

from model_adapters.tiny import TinyRecipe, text_common


def _qwen2(tok: Any) -> tuple[Any, None]:
    from transformers import Qwen2Config  # lazy: transformers (only when a checkpoint is built)

    return Qwen2Config(**text_common(tok, "qwen2"), rope_theta=1_000_000.0), None


def _qwen3(tok: Any) -> tuple[Any, None]:
    from transformers import Qwen3Config  # lazy: transformers (only when a checkpoint is built)

    return Qwen3Config(**text_common(tok, "qwen3"), rope_theta=1_000_000.0), None


def _llama3(tok: Any) -> tuple[Any, None]:
    from transformers import LlamaConfig  # lazy: transformers (only when a checkpoint is built)

    rope = {
        "rope_type": "llama3",
        "rope_theta": 500_000.0,
        "factor": 32.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 2048,  # must stay below max_position_embeddings (4096)
    }
    return LlamaConfig(**text_common(tok, "llama3"), rope_parameters=rope, hidden_act="silu"), None


TINY_QWEN2 = TinyRecipe("tiny-qwen2.5", "qwen2", _qwen2, "AutoModelForCausalLM")
TINY_LLAMA3 = TinyRecipe("tiny-llama3", "llama3", _llama3, "AutoModelForCausalLM")
TINY_QWEN3 = TinyRecipe("tiny-qwen3", "qwen3", _qwen3, "AutoModelForCausalLM")
