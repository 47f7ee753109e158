"""What vLLM returns, checked: one processed logprob per completion token, and the prompt the trainer scores.

Why apart from the engine: pure functions over vLLM's output objects, tested without an engine.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from corl_vl.errors import CorlError


def completion_logprobs(token_ids: Sequence[int], steps: Sequence[Any] | None) -> list[float]:
    """One processed logprob per token; NaN where vLLM reported no entry for the sampled token.

    A missing entry is counted as non-finite by the trainer (weight 1), never read as 0.0; a list of the wrong
    length is an engine fault and raises.
    """
    steps = list(steps or [])
    if len(steps) != len(token_ids):
        raise CorlError(
            f"vLLM returned {len(steps)} logprob entries for {len(token_ids)} completion tokens "
            "(is SamplingParams.logprobs set?)"
        )
    out = []
    for tok, step in zip(token_ids, steps):
        entry = step.get(tok) if step is not None else None
        out.append(float(entry.logprob) if entry is not None else float("nan"))
    return out


def check_prompt_tokens(prompts: Sequence[Any], outputs: Sequence[Any]) -> None:
    """vLLM's expanded prompt must be exactly the ids the trainer scores; anything else is one clear error."""
    for prompt, out in zip(prompts, outputs):
        built = list(out.prompt_token_ids or [])
        if built != prompt.prompt_ids:
            same = (i for i, (a, b) in enumerate(zip(built, prompt.prompt_ids)) if a != b)
            first = next(same, min(len(built), len(prompt.prompt_ids)))
            raise CorlError(
                f"vLLM built {len(built)} prompt tokens for problem {prompt.problem_id}, the trainer scores "
                f"{len(prompt.prompt_ids)} (first difference at token {first}); the adapter's vllm_request and "
                "processor options must give vLLM the same prompt"
            )
