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


class TurnOffload:
    """``offload()`` at the end of an agent's turn, ``reload()`` at the start of the next one."""

    def __init__(self, optimizer: torch.optim.Optimizer, model: Any, *, host: str = "cpu") -> None:
        self.optimizer = optimizer
        self.host = torch.device(host)
        model_params = {id(p) for p in model.parameters()}
        self.own = [p for g in optimizer.param_groups for p in g["params"] if id(p) not in model_params]
        self.home = {id(p): p.device for p in self.own}  # where each master trains
        self.away = False
        self.moved_bytes = 0  # bytes the last offload moved (what the device got back)
        self.turns = 0  # completed offload → reload cycles

    def _state_tensors(self) -> Iterator[tuple[dict[str, Any], str, torch.Tensor, torch.Tensor]]:
        for param, state in self.optimizer.state.items():
            for key, value in list(state.items()):
                if torch.is_tensor(value) and value.dim() > 0:
                    yield state, key, value, param

    def offload(self) -> int:
        """Copy the masters, their gradients and the optimizer state to host memory; returns the bytes moved."""
        moved = 0
        for param in self.own:
            moved += _move(param, self.host)
        for state, key, value, _ in self._state_tensors():
            state[key] = value.to(self.host, copy=True)
            moved += value.numel() * value.element_size()
        self.away, self.moved_bytes = True, moved
        return moved

    def reload(self) -> None:
        """Masters back where they train, each state tensor next to its parameter."""
        if not self.away:
            return
        for param in self.own:
            _move(param, self.home[id(param)])
        for state, key, value, param in self._state_tensors():
            if value.device != param.device:
                state[key] = value.to(param.device)
        self.away = False
        self.turns += 1


def _move(param: torch.Tensor, device: torch.device) -> int:
    """``param``'s storage (and gradient's) as a fresh copy on ``device``, keeping the tensor object; bytes."""
    grad, param.grad = param.grad, None
    param.data = param.data.to(device, copy=True)
    if grad is not None:
        param.grad = grad.to(device, copy=True)
    return param.numel() * param.element_size() + (0 if grad is None else grad.numel() * grad.element_size())


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
