"""An idle agent's optimizer state and fp32 master weights in host memory between its turns on a shared device.

Why: agents that share a GPU take turns (:mod:`corl_vl.train.device_placement`). Only the agent whose turn it is
needs its AdamW moments and fp32 masters on the device; for a bf16 model they are 12 of its 14 bytes per
parameter, so moving the idle agents' out leaves room for the working agent's gradients and activations.

Generic over a torch optimizer: the tensors its param groups step that are *not* the model's parameters (fp32
masters), their gradients, and every per-parameter state tensor. With an fp32 model the optimizer steps the
model's own parameters, which stay where they are (the model runs forwards while its agent is idle); only their
state moves. 0-dim state (AdamW's step counter) stays put: it is a few bytes, and where it lives is the
optimizer's rule (CPU, or the device for fused kernels). A moved tensor keeps its identity (``.data`` is
swapped), so the optimizer's state keys, its param groups and the backend's master list stay valid.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch


class SyncCopies:
    """Copies that are done when they return (the CPU, and any device without CUDA streams)."""

    def host_buffer(self, like: torch.Tensor, host: torch.device) -> torch.Tensor:
        return torch.empty(like.shape, dtype=like.dtype, device=host)

    def to_host(self, src: torch.Tensor, dst: torch.Tensor) -> None:
        dst.copy_(src)

    def keep_alive(self, src: torch.Tensor) -> None:
        """``src`` may be dropped by its owner before its copy to the host ran: its memory must wait for it."""

    def host_ready(self) -> None:
        """Block until every copy to the host issued so far has landed (its buffers may then be read)."""

    def to_device(self, src: torch.Tensor, device: torch.device) -> torch.Tensor:
        return src.to(device, copy=True)

    def device_ready(self) -> None:
        """Order the caller's stream after every copy to the device issued so far (no CPU wait)."""


class CudaCopies(SyncCopies):
    """Pinned buffers and non-blocking copies on a side stream (``torch.cuda.Stream``).

    To the host: the side stream waits for the compute stream (the values are final), the copies run on it,
    ``record_stream`` keeps the caching allocator from handing a dropped device tensor's memory to anyone until
    the side stream's queued work is done, and ``host_ready`` waits on an event before host memory is read. To the
    device: the copies run on the side stream, the compute stream waits on it; the next copy into the same host
    buffer is queued on the same stream, so it cannot overwrite a buffer still being read.
    """

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.stream = torch.cuda.Stream(device)

    def host_buffer(self, like: torch.Tensor, host: torch.device) -> torch.Tensor:
        return torch.empty(like.shape, dtype=like.dtype, device=host, pin_memory=True)

    def to_host(self, src: torch.Tensor, dst: torch.Tensor) -> None:
        self.stream.wait_stream(torch.cuda.current_stream(src.device))
        with torch.cuda.stream(self.stream):
            dst.copy_(src, non_blocking=True)

    def keep_alive(self, src: torch.Tensor) -> None:
        src.record_stream(self.stream)

    def host_ready(self) -> None:
        event = torch.cuda.Event()
        event.record(self.stream)
        event.synchronize()

    def to_device(self, src: torch.Tensor, device: torch.device) -> torch.Tensor:
        out = torch.empty(src.shape, dtype=src.dtype, device=device)  # allocated on the compute stream
        self.stream.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(self.stream):
            out.copy_(src, non_blocking=True)
        return out

    def device_ready(self) -> None:
        torch.cuda.current_stream(self.device).wait_stream(self.stream)


class TurnOffload:
    """``offload()`` at the end of an agent's turn, ``reload()`` at the start of the next one.

    Host memory is allocated once per tensor (at its first offload; pinned when CUDA is there) and reused every
    turn: a fresh allocation per turn costs page faults on 10 B/param, and pageable memory halves the copy speed.
    """

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        model: Any,
        *,
        host: str = "cpu",
        copies: SyncCopies | None = None,
    ) -> None:
        self.optimizer = optimizer
        self.host = torch.device(host)
        model_params = {id(p) for p in model.parameters()}
        self.own = [p for g in optimizer.param_groups for p in g["params"] if id(p) not in model_params]
        self.home = {id(p): p.device for p in self.own}  # where each master trains
        self.away = False
        self.moved_bytes = 0  # bytes the last offload moved (what the device got back)
        self.turns = 0  # completed offload → reload cycles
        self.copies = copies or _copies_for([*self.home.values(), *(p.device for p in model.parameters())])
        self.buffers: dict[tuple[int, str], torch.Tensor] = {}  # (tensor owner, role) → its host buffer
        self.host_allocations = 0  # buffers allocated so far (once per tensor, not per turn)

    def _state_tensors(self) -> Iterator[tuple[dict[str, Any], str, torch.Tensor, torch.Tensor]]:
        for param, state in self.optimizer.state.items():
            for key, value in list(state.items()):
                if torch.is_tensor(value) and value.dim() > 0:
                    yield state, key, value, param

    def _to_host(self, key: tuple[int, str], value: torch.Tensor) -> torch.Tensor:
        """``value`` copied into its host buffer (allocated on first use, or if its shape/dtype changed)."""
        buffer = self.buffers.get(key)
        if buffer is None or buffer.shape != value.shape or buffer.dtype != value.dtype:
            buffer = self.buffers[key] = self.copies.host_buffer(value, self.host)
            self.host_allocations += 1
        self.copies.to_host(value, buffer)
        self.copies.keep_alive(value)  # its owner lets go of it next; the copy may still be reading it
        return buffer

    def offload(self) -> int:
        """Copy the masters, their gradients and the optimizer state to host memory; returns the bytes moved."""
        moved = 0
        for param in self.own:
            grad, param.grad = param.grad, None
            param.data = self._to_host((id(param), "data"), param.data)
            if grad is not None:
                param.grad = self._to_host((id(param), "grad"), grad)
            moved += _nbytes(param) + (0 if grad is None else _nbytes(grad))
        for state, key, value, param in self._state_tensors():
            state[key] = self._to_host((id(param), f"state.{key}"), value)
            moved += _nbytes(value)
        self.copies.host_ready()  # host buffers are read (checkpoints) once offload returns
        self.away, self.moved_bytes = True, moved
        return moved

    def reload(self) -> None:
        """Masters back where they train, each state tensor next to its parameter."""
        if not self.away:
            return
        for param in self.own:
            grad, param.grad = param.grad, None
            param.data = self.copies.to_device(param.data, self.home[id(param)])
            if grad is not None:
                param.grad = self.copies.to_device(grad, self.home[id(param)])
        for state, key, value, param in self._state_tensors():
            if value.device != param.device:
                state[key] = self.copies.to_device(value, param.device)
        self.copies.device_ready()
        self.away = False
        self.turns += 1


def _nbytes(tensor: torch.Tensor) -> int:
    return tensor.numel() * tensor.element_size()


def _copies_for(devices: list[torch.device]) -> SyncCopies:
    """Side-stream copies when the tensors live on a CUDA device, plain copies otherwise."""
    cuda = next((d for d in devices if d.type == "cuda"), None)
    return CudaCopies(cuda) if cuda is not None else SyncCopies()


def turn_offloads(
    agents: list[Any], placement: Any, optimizer_offload: str = "none"
) -> dict[str, TurnOffload]:
    """One :class:`TurnOffload` per agent that takes turns on a shared device, already offloaded (every agent
    is idle until its first update). None needed when ``optimizer.offload: cpu`` keeps the state in host memory."""
    if placement is None or optimizer_offload != "none":
        return {}
    out = {}
    for index, agent in enumerate(agents):
        if placement.takes_turns(index):
            out[agent.name] = TurnOffload(agent.backend.optimizer, agent.model)
            out[agent.name].offload()
    return out


@contextlib.contextmanager
def turn(offload: TurnOffload | None) -> Iterator[None]:
    """An agent's turn: its state on its device inside, in host memory again after (also after an error)."""
    if offload is None:
        yield
        return
    offload.reload()
    try:
        yield
    finally:
        offload.offload()
