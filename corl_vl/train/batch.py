"""What one agent's update takes: its step data flattened into rows (one row = one completion)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch


def length_mask(completions: Sequence[Sequence[int]]) -> torch.Tensor:
    """``[B, T]`` 1.0 on each completion's tokens (the adapter's completion mask, without a forward)."""
    mask = torch.zeros(len(completions), max((len(c) for c in completions), default=0))
    for i, ids in enumerate(completions):
        mask[i, : len(ids)] = 1.0
    return mask


@dataclass
class Batch:
    """One agent's step data, flattened problem-major (row = one completion)."""

    prompts: list[Any]  # PromptInputs per row
    completions: list[list[int]]
    rollout_logprobs: torch.Tensor  # [B, T]
    advantages: torch.Tensor  # [B]
    # [B] bool: rows the loss may use (grpo.truncated: mask/drop leave truncated ones out); None → every row
    trained: torch.Tensor | None = None
