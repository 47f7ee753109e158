"""The tiny text models of the zoo (Qwen2.5, Llama-3, Qwen3), built by :mod:`model_adapters.tiny`."""

from __future__ import annotations

from typing import Any

from model_adapters.tiny import TinyRecipe, text_common
from model_adapters.tiny_tokenizer import TokenizerSpec

# The family's tokenizer for the tiny zoo (model_adapters.tiny_tokenizer trains it): its real special tokens
# and a chat template written to produce the family's published prompt layout.
QWEN2_TEMPLATE = (  # Qwen2.5 text: ChatML with the default system turn
    "{% for message in messages %}"
    "{% if loop.first and message['role'] != 'system' %}"
    "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
    "{% endif %}"
    "<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}{% if 'text' in part %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %}<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

QWEN2_TOKENIZER = TokenizerSpec(
    specials=("<|endoftext|>", "<|im_start|>", "<|im_end|>"),
    bos=None,
    eos="<|im_end|>",
    pad="<|endoftext|>",
    chat_template=QWEN2_TEMPLATE,
    generation_eos=("<|im_end|>", "<|endoftext|>"),
)

QWEN3_TEMPLATE = (  # Qwen3: ChatML, no default system turn, empty think block when thinking is switched off
    "{% for message in messages %}"
    "<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}{% if 'text' in part %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %}<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n{% endif %}"
    "{% endif %}"
)

QWEN3_TOKENIZER = TokenizerSpec(
    specials=("<|endoftext|>", "<|im_start|>", "<|im_end|>"),
    bos=None,
    eos="<|im_end|>",
    pad="<|endoftext|>",
    chat_template=QWEN3_TEMPLATE,
    plain_added=("<think>", "</think>"),
    generation_eos=("<|im_end|>", "<|endoftext|>"),
)

LLAMA3_TEMPLATE = (  # Llama-3.2 instruct: BOS, a dated default system block, header blocks, <|eot_id|> ends a turn
    "{{ bos_token }}"
    "{% if date_string is not defined %}"
    "{% if strftime_now is defined %}{% set date_string = strftime_now('%d %b %Y') %}"
    "{% else %}{% set date_string = '26 Jul 2024' %}{% endif %}"
    "{% endif %}"
    "{% if messages[0]['role'] == 'system' %}"
    "{% if messages[0]['content'] is string %}{% set system_message = messages[0]['content'] | trim %}"
    "{% else %}{% set system_message = messages[0]['content'][0]['text'] | trim %}{% endif %}"
    "{% set messages = messages[1:] %}"
    "{% else %}{% set system_message = '' %}{% endif %}"
    "<|start_header_id|>system<|end_header_id|>\n\n"
    "Cutting Knowledge Date: December 2023\nToday Date: {{ date_string }}\n\n"
    "{{ system_message }}<|eot_id|>"
    "{% for message in messages %}"
    "<|start_header_id|>{{ message['role'] }}<|end_header_id|>\n\n"
    "{% if message['content'] is string %}{{ message['content'] | trim }}"
    "{% else %}{% for part in message['content'] %}{% if 'text' in part %}{{ part['text'] | trim }}{% endif %}"
    "{% endfor %}{% endif %}<|eot_id|>"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
)

LLAMA3_TOKENIZER = TokenizerSpec(
    specials=(
        "<|begin_of_text|>",
        "<|end_of_text|>",
        "<|start_header_id|>",
        "<|end_header_id|>",
        "<|eot_id|>",
        "<|eom_id|>",
        "<|finetune_right_pad_id|>",
    ),
    bos="<|begin_of_text|>",
    eos="<|eot_id|>",
    pad="<|finetune_right_pad_id|>",
    chat_template=LLAMA3_TEMPLATE,
    add_bos=True,
    generation_eos=("<|end_of_text|>", "<|eom_id|>", "<|eot_id|>"),
)


def _qwen2(tok: Any) -> tuple[Any, None]:
    from transformers import Qwen2Config  # lazy: transformers (only when a checkpoint is built)

    return Qwen2Config(**text_common(tok, QWEN2_TOKENIZER), rope_theta=1_000_000.0), None


def _qwen3(tok: Any) -> tuple[Any, None]:
    from transformers import Qwen3Config  # lazy: transformers (only when a checkpoint is built)

    return Qwen3Config(**text_common(tok, QWEN3_TOKENIZER), rope_theta=1_000_000.0), None


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
    return LlamaConfig(**text_common(tok, LLAMA3_TOKENIZER), rope_parameters=rope, hidden_act="silu"), None


TINY_QWEN2 = TinyRecipe("tiny-qwen2.5", QWEN2_TOKENIZER, _qwen2, "AutoModelForCausalLM")
TINY_LLAMA3 = TinyRecipe("tiny-llama3", LLAMA3_TOKENIZER, _llama3, "AutoModelForCausalLM")
TINY_QWEN3 = TinyRecipe("tiny-qwen3", QWEN3_TOKENIZER, _qwen3, "AutoModelForCausalLM")
