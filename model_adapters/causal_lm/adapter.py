"""Text-only causal LMs (Qwen2.5, Llama-3.x, Qwen3): the degenerate case of the adapter interface.

No images and no processor — the tokenizer is the processor. Messages carry plain-string content, which every
text chat template accepts (some reject the list-of-parts form VLM templates use). Llama-3's template emits its
own ``<|begin_of_text|>``, so templated prompts are tokenised without special tokens (no double BOS), exactly as
the base class does for any template that starts with BOS.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from corl_vl.data.problem import Problem
from corl_vl.errors import CorlError
from model_adapters.base import ModelAdapter, format_question
from model_adapters.registry import register_adapter
from model_adapters.tiny import ensure_tiny

from .tiny import TINY_QWEN2

if TYPE_CHECKING:
    from PIL import Image


@register_adapter("causal_lm")
class CausalLMAdapter(ModelAdapter):
    """Any ``AutoModelForCausalLM`` with a chat template (Qwen2/2.5, Llama-3.x, Qwen3, Mistral, …)."""

    model_types = ("qwen2", "llama", "qwen3", "mistral")
    auto_model_class = "AutoModelForCausalLM"
    supports_images = False

    @classmethod
    def tiny_checkpoint(cls, seed: int = 0) -> Path:
        """The family's first tiny model (Qwen2.5); the Llama-3 and Qwen3 ones are presets too."""
        return ensure_tiny(TINY_QWEN2, seed=seed)

    @cached_property
    def processor(self) -> Any:
        from transformers import AutoTokenizer  # lazy: transformers (only when the tokenizer is used)

        return AutoTokenizer.from_pretrained(self.model_path, trust_remote_code=self.trust_remote_code)

    def build_messages(self, problem: Problem, images: Sequence[Image.Image] | None = None) -> list[dict]:
        if problem.images:
            raise CorlError(f"problem {problem.id}: has images but adapter '{self.name}' is text-only")
        messages: list[dict[str, Any]] = []
        if self.system_prompt:
            messages.append({"role": "system", "content": self.system_prompt})
        messages.append({"role": "user", "content": format_question(problem, self.answer_format)})
        return messages
