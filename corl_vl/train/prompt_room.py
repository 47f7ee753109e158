"""Every prompt leaves room for the completion in the model's context, or the rollout is refused in one line.

Why: past the context, a model's positions are out of range (an index error deep in generate) or silently
wrong (rotary positions it never saw). The context is the model config's ``max_position_embeddings`` of its
text backbone (:func:`corl_vl.eval.generate.context_length`); a model whose config does not say is not checked.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from corl_vl.errors import CorlError
from corl_vl.eval.generate import context_length


def check_prompt_room(agent: str, model: Any, prompts: Sequence[Any], max_new_tokens: int) -> None:
    """Raise a one-line :class:`CorlError` naming ``agent`` and the problem when a prompt (PromptInputs) is
    longer than the context minus ``max_new_tokens``."""
    limit = context_length("", model)
    if limit is None:
        return
    for prompt in prompts:
        if len(prompt.prompt_ids) > limit - max_new_tokens:
            raise CorlError(
                f"agent {agent}: problem {prompt.problem_id!r} has a {len(prompt.prompt_ids)}-token prompt, more "
                f"than the model's context ({limit}) minus grpo.max_new_tokens ({max_new_tokens}); shorten it, "
                "leave it out of the data, or lower grpo.max_new_tokens"
            )
