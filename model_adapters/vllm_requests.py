"""The vLLM side of an adapter: a request built from the one rendering of a prompt, and the engine arguments.

Why a mixin of its own: vLLM is an optional dependency and its conventions (unexpanded placeholder ids,
``multi_modal_data``) are separate from the HF paths in :mod:`model_adapters.base`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .random_init import random_init_record
from .records import PromptInputs


class VLLMRequests:
    """Mixed into :class:`~model_adapters.base.ModelAdapter`."""

    def vllm_request(self, prompt: PromptInputs) -> dict[str, Any]:
        """The vLLM prompt dict for an encoded prompt: vLLM then builds exactly ``prompt.prompt_ids``.

        Built from the prompt's *unexpanded* token ids (one placeholder per image) and its prepared images —
        nothing is rendered again: vLLM expands placeholders itself, so expanded ids would be expanded twice,
        and token ids also avoid a second BOS from vLLM's own tokenisation.
        """
        if not isinstance(prompt, PromptInputs):
            raise TypeError(
                "vllm_request takes the PromptInputs of encode_prompt (render once), not a Problem"
            )
        images = prompt.images
        if not prompt.request_ids and images:
            raise ValueError(f"prompt {prompt.problem_id}: has images but no unexpanded request_ids")
        request: dict[str, Any] = {"prompt_token_ids": list(prompt.request_ids or prompt.prompt_ids)}
        if images:
            request["multi_modal_data"] = {"image": images if len(images) > 1 else images[0]}
            kwargs = self.processor_kwargs()
            if kwargs:
                request["mm_processor_kwargs"] = kwargs
        return request

    def vllm_engine_kwargs(self, *, max_images_per_prompt: int = 1, device: str = "cpu") -> dict[str, Any]:
        """Extra ``vllm.LLM(...)`` arguments for this family (dtype, image limits, processor defaults).

        ``device``: where the engine builds (vLLM uses the process's CUDA device on a GPU); the adapter's
        ``auto`` dtype is resolved for it, never passed on as vLLM's own ``auto`` (the checkpoint's dtype).
        """
        kwargs: dict[str, Any] = {
            "model": self.model_path,
            "dtype": self.resolved_dtype(device),  # type: ignore[attr-defined]
            "trust_remote_code": self.trust_remote_code,
        }
        if random_init_record(self.model_path) is not None:  # no weights on disk: the first sync brings them
            kwargs["load_format"] = "dummy"
        if self.supports_images:
            kwargs["limit_mm_per_prompt"] = {"image": max_images_per_prompt}
            if self.processor_kwargs():
                kwargs["mm_processor_kwargs"] = self.processor_kwargs()
        else:
            kwargs["limit_mm_per_prompt"] = {"image": 0}
        return kwargs

    def vllm_weights(self, name: str, tensor: Any) -> Iterable[tuple[str, Any]]:
        """Family hook: the (name, tensor) pairs vLLM's loader reads for one checkpoint-format tensor of the model.

        Called by both weight syncs on the names ``save_pretrained`` writes. Identity by default; a family whose
        transformers save layout differs from its hub checkpoints (which vLLM's loader is written for) fixes it here.
        """
        return ((name, tensor),)
