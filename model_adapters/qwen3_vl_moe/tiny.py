"""The tiny Qwen3-VL mixture-of-experts of the zoo (30B-A3B / 235B-A22B at zoo size).

The dense tiny Qwen3-VL (:mod:`model_adapters.qwen3_vl.tiny`: same ViT, DeepStack, interleaved M-RoPE, processor)
with every text MLP replaced by routed experts, as in the released MoE sizes (no shared expert, top-k routing
with renormalised weights). Its fused expert tensors are what the adapter's vLLM weight hook exists for.
"""

from __future__ import annotations

from typing import Any

from model_adapters.qwen3_vl.tiny import TOKENIZER, qwen3_vl_recipe
from model_adapters.tiny import TinyRecipe

from .vllm_layout import to_vllm

MOE_EXPERTS = 4
MOE_TOP_K = 2
MOE_FFN = 96  # per-expert width: neither expert tensor is square (2 × 96 ≠ 256), so a transposed one fails the shape check


def qwen3_vl_moe_recipe(tok: Any) -> tuple[Any, Any]:
    """(config, processor factory) of the tiny Qwen3-VL MoE, on the Qwen3-VL tokenizer ``tok``."""
    from transformers import Qwen3VLMoeConfig  # lazy: transformers (only when a checkpoint is built)

    dense, processor = qwen3_vl_recipe(tok)
    text = dense.text_config.to_dict()
    for key in ("model_type", "architectures", "transformers_version", "dtype", "torch_dtype"):
        text.pop(key, None)
    text.update(
        num_experts=MOE_EXPERTS,
        num_experts_per_tok=MOE_TOP_K,
        moe_intermediate_size=MOE_FFN,
        decoder_sparse_step=1,
        norm_topk_prob=True,
    )
    vision = dense.vision_config.to_dict()
    for key in ("model_type", "architectures", "transformers_version", "dtype", "torch_dtype"):
        vision.pop(key, None)
    ids = {
        key: getattr(dense, key)
        for key in ("image_token_id", "video_token_id", "vision_start_token_id", "vision_end_token_id")
    }
    config = Qwen3VLMoeConfig(text_config=text, vision_config=vision, tie_word_embeddings=False, **ids)
    for key in ("bos_token_id", "eos_token_id", "pad_token_id", "vocab_size"):
        setattr(config, key, text[key])  # vLLM and older readers look at the top level too
    return config, processor


TINY = TinyRecipe("tiny-qwen3-vl-moe", TOKENIZER, qwen3_vl_moe_recipe, vllm_weights=to_vllm)
