"""The logprob tail: LM head → log-softmax → the target token's logprob (+ entropy, self-certainty), in chunks.

Why chunks: the full tail holds ``tokens × vocab`` floats several times over (logits, their fp32 copy, the
log-softmax), which at a 150–260 k vocabulary is gigabytes per thousand completion tokens. Here the head runs
on at most ``chunk_elements // vocab`` tokens at a time, and under autograd each chunk is recomputed in the
backward pass (activation checkpointing), so only the hidden states (``tokens × hidden``) stay alive between
forward and backward: the tail's memory is bounded by the chunk, not by the completion length.

The arithmetic is today's textbook one, chunk by chunk: ``log_softmax(softcap(head(h)).float() / T)``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

# fp32 elements of one chunk's logits: ≈ 12 bytes each are live at the backward's peak (log-softmax output,
# its gradient, the gradient of the gather), so 2**24 elements keep the chunk's share near 200 MB.
CHUNK_ELEMENTS = 2**24


def chunk_tokens(vocab_size: int, chunk_elements: int | None = None) -> int:
    """Tokens per chunk so that one chunk's logits hold at most ``chunk_elements`` values (default
    :data:`CHUNK_ELEMENTS`, read at call time), at least 1 token."""
    return max(1, (chunk_elements or CHUNK_ELEMENTS) // max(1, vocab_size))


def token_logprobs(
    head: Callable[[torch.Tensor], torch.Tensor],
    hidden: torch.Tensor,
    targets: torch.Tensor,
    *,
    vocab_size: int,
    temperature: float = 1.0,
    softcap: float | None = None,
    with_entropy: bool = False,
    chunk_elements: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """Per-token ``(logprob, entropy, self-certainty)`` of ``targets`` under ``softmax(head(hidden) / T)``.

    ``hidden`` is ``[N, H]`` (the final hidden states that predict the ``N`` targets), ``targets`` ``[N]``.
    Returns fp32 tensors of shape ``[N]``; entropy and self-certainty are None unless ``with_entropy``.
    Differentiable in ``hidden`` and the head's parameters when autograd is on.
    """
    import torch
    from torch.utils.checkpoint import checkpoint

    if temperature <= 0:
        raise ValueError("temperature must be > 0")

    def chunk(h: torch.Tensor, t: torch.Tensor) -> tuple[torch.Tensor, ...]:
        logits = head(h)
        if softcap is not None:  # the family's own logit soft-capping, as its forward applies it
            logits = torch.tanh(logits / softcap) * softcap
        logits = logits.float()
        if temperature != 1.0:  # in place: no backward reads the head's (or the cast's) output
            logits.div_(temperature)
        logp = torch.log_softmax(logits, dim=-1)
        del logits
        picked = logp.gather(-1, t[:, None]).squeeze(-1)
        if not with_entropy:
            return (picked,)
        entropy = -(logp.exp() * logp).sum(-1)
        # logsumexp(z) - mean_v z == -mean_v log_softmax(z) for z = logits / T (Intuitor's self-certainty)
        certainty = -logp.mean(-1)
        return picked, entropy, certainty

    step = chunk_tokens(vocab_size, chunk_elements)
    recompute = torch.is_grad_enabled() and (
        hidden.requires_grad or any(p.requires_grad for p in getattr(head, "parameters", list)())
    )
    parts: list[tuple[torch.Tensor, ...]] = []
    for start in range(0, hidden.shape[0], step):
        h, t = hidden[start : start + step], targets[start : start + step]
        parts.append(checkpoint(chunk, h, t, use_reentrant=False) if recompute else chunk(h, t))
    if not parts:
        empty = hidden.new_zeros((0,), dtype=torch.float32)
        return empty, (empty if with_entropy else None), (empty if with_entropy else None)
    picked = torch.cat([p[0] for p in parts])
    if not with_entropy:
        return picked, None, None
    return picked, torch.cat([p[1] for p in parts]), torch.cat([p[2] for p in parts])
