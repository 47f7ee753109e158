"""The text models' published sizes (Qwen2.5 3B/7B, Llama-3.2 3B, Llama-3.1 8B, Qwen3 1.7B), written down so
full-size models exist without the hub (:mod:`model_adapters.full_size`); the tokenizer is the processor."""

from __future__ import annotations

from model_adapters.full_size_configs import HF, FullSizeSpec, text_dims

from .tiny import TINY_LLAMA3, TINY_QWEN2, TINY_QWEN3

_LLAMA3_ROPE = {
    "rope_type": "llama3",
    "rope_theta": 500_000.0,
    "factor": 32.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
}

FULL_SIZE: dict[str, FullSizeSpec] = {
    "qwen2.5-3b": FullSizeSpec(
        TINY_QWEN2,
        text_dims(2048, 11008, 36, 16, 2, 151_936, tied=True),
        HF + "Qwen/Qwen2.5-3B-Instruct/blob/main/config.json",
        3.09,
    ),
    "qwen2.5-7b": FullSizeSpec(
        TINY_QWEN2,
        text_dims(3584, 18944, 28, 28, 4, 152_064, tied=False),
        HF + "Qwen/Qwen2.5-7B-Instruct/blob/main/config.json",
        7.61,
    ),
    "llama-3.2-3b-instruct": FullSizeSpec(
        TINY_LLAMA3,
        text_dims(
            3072,
            8192,
            28,
            24,
            8,
            128_256,
            tied=True,
            rope_parameters=_LLAMA3_ROPE,
            max_position_embeddings=131_072,
        ),
        HF + "meta-llama/Llama-3.2-3B-Instruct/blob/main/config.json",
        3.21,
    ),
    "llama-3.1-8b-instruct": FullSizeSpec(
        TINY_LLAMA3,
        text_dims(
            4096,
            14336,
            32,
            32,
            8,
            128_256,
            tied=False,
            rope_parameters=_LLAMA3_ROPE,
            max_position_embeddings=131_072,
        ),
        HF + "meta-llama/Llama-3.1-8B-Instruct/blob/main/config.json",
        8.03,
    ),
    "qwen3-1.7b": FullSizeSpec(
        TINY_QWEN3,
        text_dims(2048, 6144, 28, 16, 8, 151_936, tied=True, head_dim=128),
        HF + "Qwen/Qwen3-1.7B/blob/main/config.json",
        1.7,
    ),
}
