"""``data.max_prompt_tokens``: problems whose rendered prompt is longer are dropped when the cohort is built.

Why at build time and by the longest rendering: a prompt's length is the adapter's business (chat template,
image tokens), so each agent renders its own view once; a problem too long for *any* agent is dropped for all,
because every agent must be asked about the same ids (the label exchange is keyed by them). The count is logged
and kept on the cohort (``Cohort.dropped_prompts``).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from corl_vl.errors import CorlError

_log = logging.getLogger("corl_vl")


def drop_long_prompts(base: Sequence[Any], agents: Sequence[Any], limit: int | None) -> tuple[list[Any], int]:
    """``(problems every agent renders in at most limit tokens, how many were dropped)``."""
    if limit is None:
        return list(base), 0
    longest = {p.id: 0 for p in base}
    for agent in agents:
        for prompt in agent.encode([p.id for p in base]):
            longest[prompt.problem_id] = max(longest[prompt.problem_id], len(prompt))
    kept = [p for p in base if longest[p.id] <= limit]
    dropped = len(base) - len(kept)
    if not kept:
        raise CorlError(
            f"data.max_prompt_tokens={limit}: every training prompt is longer (shortest "
            f"{min(longest.values())} tokens); raise the bound or shorten the prompts"
        )
    if dropped:
        _log.warning(
            "data.max_prompt_tokens=%d: dropped %d of %d problems (prompts longer)", limit, dropped, len(base)
        )
    return kept, dropped
