"""What one agent's update takes: its step data flattened into rows (one row = one completion)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F


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


def fit_width(record: Any, width: int) -> Any:
    """A row record (the no-grad pass's ``CompletionLogprobs``) cut or 0-padded to ``width`` token columns.

    Why: the record is as wide as the longest completion of the rows it was computed on; after a selection of
    rows (the first k of the votes, dynamic sampling's kept groups) the batch is as wide as *its* longest one,
    and the update compares the two column by column. Only all-padding columns may be cut.
    """
    if record is None or record.mask.shape[1] == width:
        return record
    if bool(record.mask[:, width:].any()):
        raise RuntimeError(f"internal: a scored record has tokens beyond the batch's {width} columns")
    fields = {
        name: value[:, :width] if value.shape[1] >= width else F.pad(value, (0, width - value.shape[1]))
        for name, value in vars(record).items()
        if isinstance(value, torch.Tensor) and value.dim() == 2
    }
    return dataclasses.replace(record, **fields)


def concat_rows(records: Sequence[Any]) -> Any:
    """Row records (``CompletionLogprobs`` of consecutive row sets) stacked into one, 0-padded to the widest."""
    width = max(record.mask.shape[1] for record in records)
    padded = [fit_width(record, width) for record in records]
    fields = {
        name: torch.cat([vars(record)[name] for record in padded])
        for name, value in vars(padded[0]).items()
        if isinstance(value, torch.Tensor)
    }
    return dataclasses.replace(padded[0], **fields)
