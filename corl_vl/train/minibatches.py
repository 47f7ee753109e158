"""Several optimizer steps per rollout batch (``grpo.updates_per_batch``): how the batch is cut into
mini-batches of whole groups, and how their metrics make one step's.

Why whole groups: a group's advantages are relative to its own members, so a mini-batch that held half a group
would still be right, but keeping groups together keeps each mini-batch's loss totals (token mean, sequence
mean) comparable to the one-update case (verl's ``ppo_mini_batch_size`` counts prompts the same way).
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Sequence
from typing import Any

import torch

from model_adapters.vision_sharing import distinct_prompts


def mini_batches(rows: int, group_size: int, n: int) -> list[list[int]]:
    """``n`` consecutive row ranges of whole groups, as even as the group count allows."""
    groups = rows // group_size
    bounds = [round(groups * j / n) * group_size for j in range(n + 1)]
    return [list(range(start, end)) for start, end in itertools.pairwise(bounds)]


def old_rows(old: Any, index: list[int]) -> Any:
    """The no-grad pass's record restricted to rows ``index``."""
    select = torch.tensor(index, dtype=torch.long)
    fields = {
        name: value[select.to(value.device)]
        for name, value in vars(old).items()
        if isinstance(value, torch.Tensor)
    }
    return dataclasses.replace(old, **fields)


def merge_updates(updates: list[dict[str, float]]) -> dict[str, float]:
    """One step's metrics from its optimizer steps: counts add up, the rest is the mean over the steps
    (``lr`` is the first step's: the schedule's value when the batch was drawn)."""
    summed = ("trained_rows", "is/nonfinite_tokens", "loss", "perf/padded_tokens", "perf/update_tokens")
    merged: dict[str, float] = {}
    for key in dict.fromkeys(k for update in updates for k in update):
        values = [update[key] for update in updates if key in update]
        merged[key] = sum(values) if key in summed else sum(values) / len(values)
    merged["lr"] = updates[0]["lr"]
    if merged.get("perf/update_tokens"):  # the share of all the step's computed tokens, not a mean of shares
        merged["perf/padding_share"] = merged["perf/padded_tokens"] / merged["perf/update_tokens"]
    merged["update/skipped"] = float(all(update["update/skipped"] for update in updates))
    merged["update/count"] = float(sum(1 for update in updates if not update["update/skipped"]))
    return merged


def batch_rows(batch: Any, index: list[int]) -> Any:
    """The sub-batch of rows ``index`` of an :class:`~corl_vl.train.agent.Batch`."""
    select = torch.tensor(index, dtype=torch.long)
    trained = None if batch.trained is None else batch.trained[select]
    return dataclasses.replace(
        batch,
        prompts=[batch.prompts[i] for i in index],
        completions=[batch.completions[i] for i in index],
        rollout_logprobs=batch.rollout_logprobs[select],
        advantages=batch.advantages[select],
        trained=trained,
    )


PADDING_TARGET = 0.1  # a micro-batch closes before its padded tokens pass this share of its computed ones


def length_micro_batches(
    lengths: list[int], rows: list[int], size: int, groups: Sequence[int] | None = None
) -> list[list[int]]:
    """Rows ``rows`` cut into right-padded micro-batches by length (longest first), so little of what a forward
    computes is padding.

    A micro-batch takes the next rows in :func:`bucket_order` while (a) it stays within the token budget of
    ``size`` rows of the longest row (so no forward is larger than the largest one of ``size`` rows, which
    bounds memory as before) and (b) its padding stays within ``PADDING_TARGET`` of its tokens. Long-tailed
    lengths then give a few more, smaller forwards instead of padding short rows to the longest (TRL pads each
    micro-batch to its longest row; verl removes padding altogether).

    ``groups`` (per row, the problem whose picture it shares, -1 without one; :func:`sharing_groups`): a
    picture is encoded once per micro-batch it appears in (:mod:`model_adapters.vision_sharing`), so a
    problem's rows are kept next to each other instead of interleaved with other problems' rows of similar
    length: a problem then spans consecutive micro-batches, and the pictures encoded are at most forwards +
    problems - 1 instead of up to forwards × problems.

    Why this is exact: every loss is a sum over rows of terms that read only the row itself and whole-batch
    totals (the :class:`~corl_vl.train.grpo.Normalizer`; GSPO/GMPO's sequence ratio is the row's own), so any
    partition of the rows gives the same loss and gradient.
    """
    ordered = bucket_order(lengths, rows, groups)
    budget = max(1, size) * max((lengths[i] for i in ordered), default=0)
    micro: list[list[int]] = []
    real = width = 0
    for i in ordered:
        if micro:
            wider = max(width, lengths[i])  # the forward's width: its longest row
            computed = (len(micro[-1]) + 1) * wider
            if computed <= budget and computed - (real + lengths[i]) <= PADDING_TARGET * computed:
                micro[-1].append(i)
                real, width = real + lengths[i], wider
                continue
        micro.append([i])
        real = width = lengths[i]
    return micro


def bucket_order(lengths: list[int], rows: list[int], groups: Sequence[int] | None = None) -> list[int]:
    """The order micro-batches are filled in: longest first (stable: ties keep the given problem-major order);
    with ``groups``, problem by problem (problems by their longest row, each problem's rows longest first;
    rows of group -1 are problems of their own). Longest first: the step's peak memory comes first."""
    if groups is None:
        return sorted(rows, key=lambda i: -lengths[i])
    buckets: dict[Any, list[int]] = {}
    for i in rows:
        buckets.setdefault(groups[i] if groups[i] >= 0 else ("row", i), []).append(i)
    members = [sorted(b, key=lambda i: -lengths[i]) for b in buckets.values()]
    members.sort(key=lambda b: -lengths[b[0]])
    return [i for b in members for i in b]


def sharing_groups(adapter: Any, prompts: Sequence[Any]) -> list[int] | None:
    """Per row, the distinct picture set it shares (-1 without a picture) when ``adapter`` shares a problem's
    vision pass (:mod:`model_adapters.vision_sharing`: ``share_vision_pass`` and the family's
    ``image_feature_units``); None when it does not (text, or each row encodes its own picture)."""
    if not getattr(adapter, "share_vision_pass", False) or not any(p.mm_inputs for p in prompts):
        return None
    firsts, owner = distinct_prompts(prompts)
    if any(adapter.image_feature_units(prompts[i]) is None for i in firsts):
        return None
    return owner


def pictures_encoded(groups: Sequence[int], micro_batches: list[list[int]]) -> int:
    """Distinct picture sets summed over the micro-batches: the tower's encodings when each micro-batch encodes
    each of its distinct pictures once (rows of group -1 have none)."""
    return sum(len({groups[i] for i in mb} - {-1}) for mb in micro_batches)


def row_lengths(prompts: list[Any], completions: list[list[int]]) -> list[int]:
    """Tokens each row feeds the forward: prompt (picture tokens included) + completion."""
    return [len(p) + len(c) for p, c in zip(prompts, completions)]


def padding_tokens(lengths: list[int], micro_batches: list[list[int]]) -> tuple[int, int]:
    """``(padded, computed)`` tokens of right-padded forwards over ``micro_batches``: each is as wide as its
    longest row."""
    computed = sum(len(mb) * max(lengths[i] for i in mb) for mb in micro_batches if mb)
    real = sum(lengths[i] for mb in micro_batches for i in mb)
    return computed - real, computed
