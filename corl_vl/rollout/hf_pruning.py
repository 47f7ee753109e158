"""Finished rows leave HF ``generate``'s decode batch (:class:`~corl_vl.rollout.hf.HFEngine`, ``prune_finished``).

Why: ``generate`` keeps a row that produced its stop token in the batch, fed pad tokens, until the longest row
ends. With long-tailed completion lengths most decode steps then carry finished rows (8 rows cost ~2× a 2-row
step on a CPU). vLLM drops them (continuous batching); TRL's HF path does not.

How: ``generate`` runs in segments. A stopping criterion ends the current call once enough of its rows have
finished; the unfinished rows' KV cache entries are selected (``batch_select_indices``, Qwen-VL's M-RoPE
``rope_deltas`` with them) and ``generate`` continues from that cache with those rows' whole sequences (prompt +
tokens so far), as ``_shared_prefix`` continues from a prefilled prompt. The sampler keeps drawing over a
probability matrix of all the call's rows (finished ones get a one-hot), so the generator stream and every
active row's draw are the single call's (see ``_SeededSampler``): the tokens are the unpruned engine's, up to
float differences from the batch composition.

Only caches made of plain dynamic layers (full or sliding-window attention) can drop rows; models whose cache
holds anything else (linear attention, static or quantised caches, stateful models) run one call as before.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import LogitsProcessorList, StoppingCriteria, StoppingCriteriaList
from transformers.cache_utils import DynamicCache, DynamicLayer, DynamicSlidingWindowLayer

from corl_vl.errors import CorlError

# Tokens of a row kept alongside ``input_ids``: extended per generated token as ``generate`` itself does
# (``token_type_ids`` repeat their last column, ``mm_token_type_ids`` are text: zeros).
PER_ROW = ("input_ids", "attention_mask", "token_type_ids", "mm_token_type_ids")


def can_prune(model: Any) -> bool:
    """Whether ``generate``'s cache for ``model`` is one whose rows can be dropped between calls."""
    if getattr(model, "_is_stateful", False):
        return False
    supports = getattr(model, "_supports_default_dynamic_cache", None)
    if supports is None or not supports():
        return False
    try:
        cache = DynamicCache(config=model.config.get_text_config(decoder=True))
    except Exception:  # a config DynamicCache cannot read: keep the one-call path
        return False
    return all(type(layer) in (DynamicLayer, DynamicSlidingWindowLayer) for layer in cache.layers)


def min_drop(active: int) -> int:
    """Rows that must finish before a call ends: each extra ``generate`` call has a fixed setup cost."""
    return max(1, active // 4)


class _RowsFinished(StoppingCriteria):
    """Ends the call (every row) once ``min_drop`` of its rows produced an end token (a stop token or an image
    placeholder, which cuts a completion too) since it began."""

    def __init__(self, ends: torch.Tensor, rows: int) -> None:
        self.ends = ends
        self.done: torch.Tensor | None = None
        self.needed = min_drop(rows)

    def __call__(self, input_ids: torch.LongTensor, scores: Any, **kwargs: Any) -> torch.BoolTensor:
        ended = torch.isin(input_ids[:, -1], self.ends.to(input_ids.device))
        self.done = ended if self.done is None else self.done | ended
        stop = int(self.done.sum()) >= self.needed
        return torch.full((input_ids.shape[0],), stop, dtype=torch.bool, device=input_ids.device)


def segmented_generate(
    model: Any,
    batch: dict[str, Any],
    processors: LogitsProcessorList,
    *,
    sampler: Any,
    recorder: Any,
    ends: list[int],
    max_new_tokens: int,
    min_new_tokens: int,
    prune: bool,
    **options: Any,
) -> tuple[list[list[int]], list[list[float]]]:
    """Each row's new tokens and their logprobs (pads after its end token included; the caller cuts).

    ``processors`` is tagged ``segment = (rows, made)`` for each call: the call's rows as indices of the
    original rows and the tokens each made before it (benchmarks that force lengths follow rows with it).
    """
    rows = batch["input_ids"].shape[0]
    active = torch.arange(rows)
    tokens: list[list[int]] = [[] for _ in range(rows)]
    logprobs: list[list[float]] = [[] for _ in range(rows)]
    end_ids = torch.tensor(sorted(set(ends)), dtype=torch.long)
    made, inputs = 0, batch
    while True:
        stopper = _RowsFinished(end_ids, len(active)) if prune else None
        processors.segment = (active.tolist(), made)
        if sampler is not None:
            sampler.rows = active if len(active) < rows else None
        left_min = min_new_tokens - made
        out = model.generate(
            **inputs,
            logits_processor=processors,
            stopping_criteria=StoppingCriteriaList([stopper] if stopper else []),
            max_new_tokens=max_new_tokens - made,
            min_new_tokens=left_min if left_min > 0 else None,
            return_dict_in_generate=True,
            **options,
        )
        width = inputs["input_ids"].shape[1]
        new = out.sequences[:, width:]
        lps = recorder.finish(new).tolist()
        recorder.reset()
        for j, (row_ids, row_lp) in enumerate(zip(new.tolist(), lps)):
            tokens[int(active[j])] += row_ids
            logprobs[int(active[j])] += row_lp
        made += new.shape[1]
        # finished from the tokens themselves, not the stopper's view (a deferred stop check undoes a step)
        keep = ~torch.isin(new, end_ids.to(new.device)).any(dim=1).cpu()
        if not prune or made >= max_new_tokens or not keep.any() or keep.all():
            return tokens, logprobs
        inputs = _continued(model, inputs, out, keep)
        active = active[keep]


def _continued(model: Any, inputs: dict[str, Any], out: Any, keep: torch.Tensor) -> dict[str, Any]:
    """``generate``'s inputs for the kept rows: their whole sequences and the cache pruned to them."""
    cache = out.past_key_values
    sequences = out.sequences
    if not isinstance(cache, DynamicCache) or cache.get_seq_length() != sequences.shape[1] - 1:
        raise CorlError(
            f"HF generate returned a {type(cache).__name__} cache that cannot drop finished rows; build the "
            "engine with HFEngine(..., prune_finished=False)"
        )
    index = keep.nonzero().flatten().to(sequences.device)
    cache.batch_select_indices(index)
    base = getattr(model, "model", None)
    deltas = getattr(base, "rope_deltas", None)
    if isinstance(deltas, torch.Tensor) and deltas.shape[0] == keep.shape[0]:
        base.rope_deltas = deltas[index.to(deltas.device)]
    grown = sequences.shape[1] - inputs["input_ids"].shape[1]
    result: dict[str, Any] = {"input_ids": sequences[index], "past_key_values": cache}
    mask = inputs.get("attention_mask")
    if mask is not None:
        result["attention_mask"] = torch.cat([mask[index], mask.new_ones(len(index), grown)], dim=1)
    if (types := inputs.get("token_type_ids")) is not None:
        result["token_type_ids"] = torch.cat([types[index], types[index][:, -1:].repeat(1, grown)], dim=1)
    if (mm := inputs.get("mm_token_type_ids")) is not None:
        result["mm_token_type_ids"] = torch.cat([mm[index], mm.new_zeros(len(index), grown)], dim=1)
    return result
