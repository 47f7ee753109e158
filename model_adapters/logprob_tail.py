"""The logprob tail: LM head → log-softmax → the target token's logprob (+ entropy, self-certainty), in chunks.

Why chunks: the full tail holds ``tokens × vocab`` floats several times over (logits, their fp32 copy, the
log-softmax), which at a 150–260 k vocabulary is gigabytes per thousand completion tokens. Here the head runs
on at most ``chunk_elements // vocab`` tokens at a time, and under autograd each chunk is recomputed in the
backward pass, so only the hidden states (``tokens × hidden``) stay alive between forward and backward: the
tail's memory is bounded by the chunk, not by the completion length.

A plain linear head (every supported family's) goes through the autograd function of :func:`_linear_tail`,
whose backward adds the chunks' LM-head weight gradients into ONE buffer: left to autograd, each chunk's
gradient is a full ``vocab × hidden`` tensor summed out of place, so two or three of them are alive at the
peak; it sums them in fp32 and rounds to the head's dtype once (bf16 sums drop later chunks' shares). Under
ZeRO-3 the whole tail is ONE call of the head module (:func:`_zero3_tail`): per chunk, each call would be an
all-gather of the weight and an entry in ZeRO-3's trace, and ranks with other token counts would hang. Any
other head (a wrapped one) takes the generic path: activation checkpointing per chunk.

The arithmetic is the textbook one, chunk by chunk: ``log_softmax(softcap(head(h)).float() / T)``.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from corl_vl.errors import CorlError

if TYPE_CHECKING:
    import torch

# fp32 elements of one chunk's logits: ≈ 12 bytes each are live at the backward's peak (the log-softmax, the
# logits' gradient, a cast of it), so 2**24 elements keep the chunk's share near 200 MB.
CHUNK_ELEMENTS = 2**24
# Forces the tokens per chunk (read at call time): to exercise several chunks at a tiny vocabulary, or to trade
# the tail's memory for fewer head calls. Unset: the element budget above decides.
CHUNK_TOKENS_ENV = "CORL_VL_LOGPROB_CHUNK_TOKENS"


def chunk_tokens(vocab_size: int, chunk_elements: int | None = None) -> int:
    """Tokens per chunk: ``chunk_elements // vocab`` when given, else ``$CORL_VL_LOGPROB_CHUNK_TOKENS`` when set,
    else so that one chunk's logits hold at most :data:`CHUNK_ELEMENTS` values (read at call time); at least 1."""
    if chunk_elements is None and os.environ.get(CHUNK_TOKENS_ENV, "").strip():
        forced = os.environ[CHUNK_TOKENS_ENV].strip()
        if not forced.isdigit() or int(forced) < 1:
            raise CorlError(
                f"{CHUNK_TOKENS_ENV}={forced!r}: expected a whole number of tokens >= 1 (or unset)"
            )
        return int(forced)
    return max(1, (chunk_elements or CHUNK_ELEMENTS) // max(1, vocab_size))


def _chunk_log_softmax(
    head: Callable[[torch.Tensor], torch.Tensor], h: torch.Tensor, temperature: float, softcap: float | None
) -> torch.Tensor:
    """fp32 ``log_softmax(softcap(head(h)).float() / T)`` of one chunk, with no extra full-size copy."""
    import torch  # lazy: torch

    logits = head(h)
    if softcap is not None:  # the family's own logit soft-capping, as its forward applies it
        logits = torch.tanh(logits / softcap) * softcap
    logits = logits.float()
    if temperature != 1.0:  # in place: no backward reads the head's (or the cast's) output
        logits.div_(temperature)
    return torch.log_softmax(logits, dim=-1)


def _chunk_outputs(
    logp: torch.Tensor, t: torch.Tensor, with_entropy: bool
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    picked = logp.gather(-1, t[:, None]).squeeze(-1)
    if not with_entropy:
        return picked, None, None
    entropy = -(logp.exp() * logp).sum(-1)
    # logsumexp(z) - mean_v z == -mean_v log_softmax(z) for z = logits / T (Intuitor's self-certainty)
    certainty = -logp.mean(-1)
    return picked, entropy, certainty


def _linear_head(head: Any, hidden: torch.Tensor) -> bool:
    """A plain ``nn.Linear`` over ``hidden``'s width (not a subclass with other weights)."""
    import torch  # lazy: torch

    if type(head) is not torch.nn.Linear:
        return False
    shape = getattr(
        head.weight, "ds_shape", head.weight.shape
    )  # a ZeRO-3 partition's own shape is not the weight's
    return len(shape) == 2 and shape[1] == hidden.shape[-1]


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
    import torch  # lazy: torch

    if temperature <= 0:
        raise ValueError("temperature must be > 0")
    step = chunk_tokens(vocab_size, chunk_elements)
    if hidden.shape[0] == 0:
        empty = hidden.new_zeros((0,), dtype=torch.float32)
        return empty, (empty if with_entropy else None), (empty if with_entropy else None)
    trains = torch.is_grad_enabled() and (
        hidden.requires_grad or any(p.requires_grad for p in getattr(head, "parameters", list)())
    )
    options = {"step": step, "temperature": temperature, "softcap": softcap, "with_entropy": with_entropy}
    if not _linear_head(head, hidden):
        return _chunks(head, hidden, targets, trains=trains, **options)
    if getattr(head.weight, "ds_id", None) is not None:
        return _zero3_tail(head, hidden, targets, trains=trains, **options)
    if not trains:
        return _chunks(head, hidden, targets, trains=False, **options)
    picked, entropy, certainty = _linear_tail().apply(
        hidden, head.weight, head.bias, targets, head, step, temperature, softcap, with_entropy
    )
    return (picked, entropy, certainty) if with_entropy else (picked, None, None)


def _chunks(
    head: Callable[[torch.Tensor], torch.Tensor],
    hidden: torch.Tensor,
    targets: torch.Tensor,
    *,
    trains: bool,
    step: int,
    temperature: float,
    softcap: float | None,
    with_entropy: bool,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """The generic path: the head per chunk, under autograd with activation checkpointing per chunk."""
    import torch  # lazy: torch
    from torch.utils.checkpoint import checkpoint  # lazy: torch

    def chunk(h: torch.Tensor, t: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        return _chunk_outputs(_chunk_log_softmax(head, h, temperature, softcap), t, with_entropy)

    parts: list[tuple[torch.Tensor | None, ...]] = []
    for start in range(0, hidden.shape[0], step):
        h, t = hidden[start : start + step], targets[start : start + step]
        parts.append(checkpoint(chunk, h, t, use_reentrant=False) if trains else chunk(h, t))
    picked = torch.cat([p[0] for p in parts])
    if not with_entropy:
        return picked, None, None
    return picked, torch.cat([p[1] for p in parts]), torch.cat([p[2] for p in parts])


def _zero3_tail(
    head: Any, hidden: torch.Tensor, targets: torch.Tensor, *, trains: bool, **options: Any
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """A ZeRO-3 head: the whole tail runs as ONE call of the head module, its chunks on the weight as gathered.

    Why: each call of the module is one all-gather of its weight and one entry in ZeRO-3's module trace (and,
    under autograd, one more of each in backward). Called per chunk, ranks that score different token counts
    make different numbers of collectives and hang (measured: 2 gloo ranks, 5 chunks against 2). Called once,
    ZeRO-3's own hooks gather the weight once forward and once backward, around the tail's own backward, so the
    weight's gradient is produced while it is whole (as for any module)."""
    import torch  # lazy: torch

    weight, bias = head.weight, head.bias

    def linear(h: torch.Tensor) -> torch.Tensor:  # the weight as gathered, without the module's hooks
        return torch.nn.functional.linear(h, weight, bias)

    def whole_tail(h: torch.Tensor, t: torch.Tensor) -> tuple[torch.Tensor, ...]:
        if not trains:
            return tuple(x for x in _chunks(linear, h, t, trains=False, **options) if x is not None)
        o = options
        return _linear_tail().apply(
            h, weight, bias, t, linear, o["step"], o["temperature"], o["softcap"], o["with_entropy"]
        )

    head.forward = whole_tail  # for this one call: ZeRO-3's hooks wrap whatever ``forward`` the module has
    try:
        out = head(hidden, targets)
    finally:
        del head.forward
    if not options["with_entropy"]:
        return out[0], None, None
    return out[0], out[1], out[2]


@functools.cache
def _linear_tail() -> type:
    """The autograd function, built on first use (torch is imported lazily across the package)."""
    import torch  # lazy: torch

    class LinearTail(torch.autograd.Function):
        """Chunked tail of a linear head with a hand-written backward (see the module docstring for why).

        Per chunk of rows ``x = softcap(h Wᵀ + b).float() / T``, ``logp = log_softmax(x)``, ``p = exp(logp)``:
        d picked/dx = onehot(t) − p;  d entropy/dx = −p (logp + entropy);  d certainty/dx = p − 1/V.
        """

        @staticmethod
        def forward(  # type: ignore[override]
            ctx: Any,
            hidden: torch.Tensor,
            weight: torch.Tensor,
            bias: torch.Tensor | None,
            targets: torch.Tensor,
            head: Any,
            step: int,
            temperature: float,
            softcap: float | None,
            with_entropy: bool,
        ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
            parts = []
            for start in range(0, hidden.shape[0], step):
                logp = _chunk_log_softmax(head, hidden[start : start + step], temperature, softcap)
                parts.append(_chunk_outputs(logp, targets[start : start + step], with_entropy))
                del logp
            picked = torch.cat([p[0] for p in parts])
            if with_entropy:
                entropy, certainty = torch.cat([p[1] for p in parts]), torch.cat([p[2] for p in parts])
            else:  # placeholders: a Function's outputs must be tensors
                entropy, certainty = picked.new_zeros(0), picked.new_zeros(0)
                ctx.mark_non_differentiable(entropy, certainty)
            ctx.save_for_backward(hidden, weight, bias, targets, entropy)
            ctx.head, ctx.step, ctx.temperature, ctx.softcap = head, step, temperature, softcap
            ctx.set_materialize_grads(False)
            return picked, entropy, certainty

        @staticmethod
        @torch.autograd.function.once_differentiable
        def backward(  # type: ignore[override]
            ctx: Any, g_picked: torch.Tensor | None, g_entropy: torch.Tensor | None, g_sc: torch.Tensor | None
        ) -> tuple[torch.Tensor | None, ...]:
            hidden, weight, bias, targets, entropy = ctx.saved_tensors
            return _linear_tail_backward(
                ctx, hidden, weight, bias, targets, entropy, g_picked, g_entropy, g_sc
            )

    return LinearTail


def _linear_tail_backward(
    ctx: Any,
    hidden: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    targets: torch.Tensor,
    entropy: torch.Tensor,
    g_picked: torch.Tensor | None,
    g_entropy: torch.Tensor | None,
    g_sc: torch.Tensor | None,
) -> tuple[torch.Tensor | None, ...]:
    """The gradients of :class:`LinearTail`'s inputs, chunk by chunk.

    The head's weight and bias gradients sum over every chunk in ONE fp32 buffer, rounded to the parameter's
    dtype once at the end: summed in bf16, a total swamps each later chunk's share (its 8-bit significand drops
    what is below half an ulp of the running sum), as the Torch backend's fp32 accumulation never does."""
    import torch  # lazy: torch

    need_h, need_w, need_b = ctx.needs_input_grad[:3]
    grad_h = torch.empty_like(hidden) if need_h else None
    grad_w = torch.zeros_like(weight, dtype=torch.float32) if need_w else None
    grad_b = torch.zeros_like(bias, dtype=torch.float32) if need_b else None
    for start in range(0, hidden.shape[0], ctx.step):
        stop = min(start + ctx.step, hidden.shape[0])
        h = hidden[start:stop]
        # recomputed through the module (its hooks see every chunk); under ZeRO-3 on the gathered weight
        z = ctx.head(h)
        grad_z = _logits_gradient(
            ctx, z, targets[start:stop], entropy, start, stop, g_picked, g_entropy, g_sc
        ).to(weight.dtype)
        del z
        if grad_h is not None:
            grad_h[start:stop] = grad_z @ weight
        if grad_w is not None:
            _add_outer(grad_w, grad_z, h.to(weight.dtype))
        if grad_b is not None:
            grad_b.add_(grad_z.sum(0, dtype=torch.float32))
    grad_w = None if grad_w is None else grad_w.to(weight.dtype)  # the same buffer for an fp32 head
    grad_b = None if grad_b is None else grad_b.to(bias.dtype)
    return grad_h, grad_w, grad_b, None, None, None, None, None, None


def _add_outer(acc: torch.Tensor, grad_z: torch.Tensor, h: torch.Tensor) -> None:
    """``acc += grad_zᵀ h`` into the fp32 ``acc``. A low-precision chunk's product is formed in its own dtype (fast
    matmul kernels) over slices of the vocabulary no larger than the chunk's logits, then added in fp32."""
    import torch  # lazy: torch

    if acc.dtype == grad_z.dtype:
        acc.addmm_(grad_z.t(), h)
        return
    rows = max(1, grad_z.numel() // max(1, h.shape[1]))
    for v in range(0, acc.shape[0], rows):
        acc[v : v + rows].add_(torch.mm(grad_z[:, v : v + rows].t(), h))


def _logits_gradient(
    ctx: Any,
    z: torch.Tensor,
    t: torch.Tensor,
    entropy: torch.Tensor,
    start: int,
    stop: int,
    g_picked: torch.Tensor | None,
    g_entropy: torch.Tensor | None,
    g_sc: torch.Tensor | None,
) -> torch.Tensor:
    """Gradient of the chunk's outputs with respect to the head's output ``z`` (overwritten), in ``z``'s dtype.

    At most two fp32 chunk-sized tensors are alive at once (the log-softmax, reused in place, and ``p``)."""
    import torch  # lazy: torch

    logp = _chunk_log_softmax(lambda _h: z, z, ctx.temperature, ctx.softcap)
    coef = torch.zeros(stop - start, 1, dtype=logp.dtype, device=logp.device)  # per row: −p × coef
    if g_picked is not None:
        coef += g_picked[start:stop, None]
    if g_sc is not None:
        coef -= g_sc[start:stop, None]
    if g_entropy is not None:
        p = logp.exp()
        grad = (
            logp.add_(entropy[start:stop, None]).mul_(g_entropy[start:stop, None]).add_(coef).mul_(p).neg_()
        )
        del p
    else:
        grad = logp.exp_().mul_(-coef)
    if g_picked is not None:
        grad.scatter_add_(1, t[:, None], g_picked[start:stop, None])
    if g_sc is not None:
        grad.sub_(g_sc[start:stop, None] / z.shape[-1])
    if ctx.temperature != 1.0:
        grad.div_(ctx.temperature)
    grad_z = grad.to(z.dtype)
    del grad
    if ctx.softcap is not None:  # d(c·tanh(z/c))/dz = 1 − tanh²(z/c)
        grad_z.mul_(z.div_(ctx.softcap).tanh_().square_().neg_().add_(1))
    return grad_z
