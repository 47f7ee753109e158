"""AdamW over fp32 master weights at 16 bytes per bf16 parameter, with gradients accumulated in fp32.

Why split masters: the high 16 bits of an fp32 number are a bf16 number. The model's bf16 weight *is* the
rounded master's high half, so only the low 16 bits are stored beside it (an int16 tensor): the fp32 master
costs 2 more bytes per parameter instead of 4, and :func:`combine` rebuilds it bit for bit. With fp32
gradients (4) and AdamW's moments (8) the steady state is 2 + 2 + 4 + 8 = 16 bytes per trained parameter.

Why hooks: each parameter's gradient is added into its fp32 accumulator as soon as autograd has produced it
(``register_post_accumulate_grad_hook``) and the low-precision gradient is dropped, so micro-batches are summed
in fp32 and no bf16 gradient outlives its backward pass.

Why chunks: the step rebuilds each master, runs AdamW and splits it back ``CHUNK`` elements at a time, so the
step's temporaries stay a few MiB however large the biggest tensor (a 150k-token embedding) is.

Where masters live (``kind``): ``self`` — an fp32 (or fp64) parameter is its own master; ``split`` — a bf16
parameter's low halves on its device; ``copy`` — a full fp32 copy (fp16 parameters, or ``offload``: in CPU
memory, where the step then runs and the rounded weights are copied back). The masters are the optimizer's
parameters and the moments sit in ``optimizer.state``, so code that moves an optimizer's tensors between
devices in place applies.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from torch.optim.adam import adam as adam_functional
from torch.utils._foreach_utils import _get_fused_kernels_supported_devices

from corl_vl.errors import CorlError

CHUNK = 1 << 20  # elements per step slice: 4 MiB of fp32


def split_fp32(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(``hi``: bf16 nearest to ``x``, ``lo``: int16 remainder) with ``combine(hi, lo)`` equal to ``x`` bit for
    bit. Ties round away from zero: that keeps the remainder inside int16's range."""
    bits = x.contiguous().view(torch.int32)
    high = (bits + 0x8000) >> 16  # on the sign-magnitude pattern: round the magnitude half up
    low = (bits - (high << 16)).to(torch.int16)  # in [-32768, 32767]
    return high.to(torch.int16).view(torch.bfloat16), low


def combine(hi: torch.Tensor, lo: torch.Tensor) -> torch.Tensor:
    """The fp32 tensor whose high half is ``hi`` (bf16) and whose low half is ``lo`` (int16, signed offset)."""
    bits = hi.contiguous().view(torch.int16).to(torch.int32)
    bits.bitwise_left_shift_(16).add_(lo.to(bits.device))
    return bits.view(torch.float32)


def round_into(weight: torch.Tensor, master: torch.Tensor) -> None:
    """Write the fp32 ``master`` (any device) into the model's ``weight``, rounded as the split masters are."""
    if weight.dtype == torch.bfloat16:
        weight.copy_(split_fp32(master)[0])
    else:
        weight.copy_(master)


def fused_available(device: torch.device) -> bool:
    """Whether this torch has a fused AdamW kernel for fp32 tensors on ``device``'s type."""
    return device.type in _get_fused_kernels_supported_devices()


def resolve_fused(fused: bool | None, device: torch.device) -> bool:
    """``optimizer.fused``: None → the fused kernel where available; True → required; False → never."""
    available = fused_available(device)
    if fused and not available:
        raise CorlError(
            f"optimizer.fused: true, but torch {torch.__version__} has no fused AdamW for {device.type}; "
            "set optimizer.fused to null (use it where available) or false"
        )
    return available if fused is None else fused


def clip_gradients(grads: list[torch.Tensor], max_norm: float) -> torch.Tensor:
    """Scale ``grads`` in place to a total L2 norm of at most ``max_norm`` (0: no clipping, as in DeepSpeed;
    torch would scale every gradient to 0) and return the norm before clipping (as ``clip_grad_norm_``)."""
    if not grads:
        return torch.tensor(0.0)
    norm = torch.nn.utils.get_total_norm(grads, 2.0)
    if max_norm > 0:
        scale = torch.clamp(max_norm / (norm + 1e-6), max=1.0)
        for grad in grads:
            grad.mul_(scale.to(grad.device))
    return norm


def _dtype(master: torch.Tensor) -> torch.dtype:
    """What the step computes in: fp32, or an fp64 weight's own precision (low halves are int16)."""
    return master.dtype if master.dtype == torch.float64 else torch.float32


def _chunks(n: int) -> Iterator[slice]:
    for start in range(0, n, CHUNK):
        yield slice(start, min(n, start + CHUNK))


class MasterAdamW(torch.optim.Optimizer):
    """AdamW (decoupled weight decay) stepping fp32 masters of ``weights`` (module docstring).

    ``offload``: masters, moments and gradient accumulators in CPU memory; ``force_masters``: a separate fp32
    copy even for fp32 weights. Gradients enter through :meth:`add_grad` (hooked to every weight) or, when a
    caller set ``weight.grad`` itself, are collected at :meth:`step`.
    """

    def __init__(
        self,
        weights: list[torch.nn.Parameter],
        *,
        lr: float,
        betas: tuple[float, float],
        weight_decay: float,
        eps: float = 1e-8,
        fused: bool | None = None,
        offload: bool = False,
        force_masters: bool = False,
    ) -> None:
        self.weights, self.kinds, masters = list(weights), [], []
        for weight in self.weights:
            if not weight.is_contiguous():  # the chunked step works on flat views
                weight.data = weight.data.contiguous()
            if weight.dtype in (torch.float32, torch.float64) and not offload and not force_masters:
                kind, master = "self", weight
            elif weight.dtype == torch.bfloat16 and not offload:
                kind, master = "split", torch.zeros_like(weight, dtype=torch.int16)  # master == weight
            else:
                where = "cpu" if offload else weight.device
                kind, master = "copy", weight.detach().to(where, torch.float32, copy=True)
            self.kinds.append(kind)
            masters.append(master)
        device = masters[0].device if masters else torch.device("cpu")
        defaults = {
            "lr": lr,
            "betas": betas,
            "weight_decay": weight_decay,
            "eps": eps,
            "fused": resolve_fused(fused, device),
        }
        super().__init__(masters, defaults)
        self.grads: list[torch.Tensor | None] = [None] * len(masters)
        self._hooks = [
            w.register_post_accumulate_grad_hook(self._hook(i)) for i, w in enumerate(self.weights)
        ]

    @property
    def masters(self) -> list[torch.Tensor]:
        """The stored masters, parallel to ``weights`` (read from the param group: code that moves the
        optimizer's tensors to another device in place, ``tensor.data = …``, is seen here)."""
        return self.param_groups[0]["params"]

    def remove_hooks(self) -> None:
        """Stop taking over the weights' gradients (another optimizer is to step them)."""
        for handle in self._hooks:
            handle.remove()
        self._hooks = []

    def _hook(self, index: int) -> Any:
        def hook(weight: torch.Tensor) -> None:
            self.add_grad(index, weight.grad)
            weight.grad = None

        return hook

    @torch.no_grad()
    def add_grad(self, index: int, grad: torch.Tensor | None) -> None:
        """Add one backward pass's gradient of weight ``index`` into its fp32 accumulator."""
        if grad is None:
            return
        master, acc = self.masters[index], self.grads[index]
        if acc is None and self.kinds[index] == "self" and grad.is_contiguous():
            self.grads[index] = grad  # already fp32 where the step runs: taken over, not copied
            return
        if acc is None:
            acc = self.grads[index] = torch.empty(master.shape, dtype=_dtype(master), device=master.device)
            for part in _chunks(acc.numel()):
                acc.view(-1)[part].copy_(grad.reshape(-1)[part])
            return
        for part in _chunks(acc.numel()):
            acc.view(-1)[part].add_(grad.reshape(-1)[part].to(acc.device, acc.dtype))

    def collect_grads(self) -> list[torch.Tensor]:
        """Take over gradients set on the weights directly (no backward hook ran); the fp32 accumulators."""
        for index, weight in enumerate(self.weights):
            if weight.grad is not None:
                self.add_grad(index, weight.grad)
                weight.grad = None
        return [g for g in self.grads if g is not None]

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.grads = [None] * len(self.masters)
        for weight in self.weights:
            weight.grad = None

    def full_master(self, index: int) -> torch.Tensor:
        """Weight ``index``'s fp32 master, rebuilt whole (a copy for ``split``; for tests and checkpoints)."""
        kind, master = self.kinds[index], self.masters[index]
        return combine(self.weights[index].detach(), master) if kind == "split" else master

    @torch.no_grad()
    def load_master(self, index: int, saved: torch.Tensor | None) -> None:
        """Restore weight ``index``'s master from a checkpoint: low halves (int16), a full fp32 master, or
        nothing (the master restarts from the loaded weight)."""
        kind, master, weight = self.kinds[index], self.masters[index], self.weights[index].detach()
        if kind == "self":
            return
        if saved is None:
            master.copy_(torch.zeros_like(master) if kind == "split" else weight.float())
        elif kind == "copy":
            master.copy_(combine(weight, saved) if saved.dtype == torch.int16 else saved)
        elif saved.dtype == torch.int16:
            master.copy_(saved)
        else:
            hi, lo = split_fp32(saved.to(weight.device, torch.float32))
            weight.copy_(hi)
            master.copy_(lo)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Torch's, keeping this run's choice of kernel (a checkpoint's ``fused`` says how *it* was stepped)."""
        fused = self.defaults["fused"]
        super().load_state_dict(state_dict)
        for group in self.param_groups:
            group["fused"] = fused

    @torch.no_grad()
    def step(self, closure: Any = None) -> None:
        """One AdamW step of every weight that has a gradient, chunk by chunk; the weights get the result."""
        group = self.param_groups[0]
        beta1, beta2 = group["betas"]
        options = {
            "amsgrad": False,
            "beta1": beta1,
            "beta2": beta2,
            "lr": group["lr"],
            "weight_decay": group["weight_decay"],
            "eps": group["eps"],
            "maximize": False,
            "decoupled_weight_decay": True,
            "fused": group["fused"],
            "foreach": False if group["fused"] else None,
        }
        for index, master in enumerate(self.masters):
            grad = self.grads[index]
            if grad is None:
                continue
            state = self.state[master]
            if not state:
                state["step"] = torch.zeros((), dtype=torch.float32, device=master.device)
                state["exp_avg"] = torch.zeros(master.shape, dtype=_dtype(master), device=master.device)
                state["exp_avg_sq"] = torch.zeros(master.shape, dtype=_dtype(master), device=master.device)
            self._step_one(index, state, grad, options)
            state["step"].add_(1)

    def _step_one(self, index: int, state: dict[str, Any], grad: torch.Tensor, options: dict) -> None:
        kind, master, weight = self.kinds[index], self.masters[index], self.weights[index].detach()
        flat = {
            name: t.view(-1)
            for name, t in (
                ("w", weight),
                ("m", master),
                ("g", grad),
                ("a", state["exp_avg"]),
                ("s", state["exp_avg_sq"]),
            )
        }
        for part in _chunks(master.numel()):
            if kind == "split":
                full = combine(flat["w"][part], flat["m"][part])
            else:
                full = flat["m"][part]
            # every chunk continues from the same step count (a fused kernel wants it on the master's device)
            step = state["step"].to(master.device, torch.float32, copy=True)
            adam_functional(
                [full], [flat["g"][part]], [flat["a"][part]], [flat["s"][part]], [], [step], **options
            )
            if kind == "split":
                hi, lo = split_fp32(full)
                flat["w"][part].copy_(hi)
                flat["m"][part].copy_(lo)
            elif kind == "copy":
                round_into(flat["w"][part], full)
