"""Which device(s) each agent of a one-process run trains on, and which agents take turns on a shared one.

Why: one process holding every agent must not put them all on the first GPU. A second agent's model, masters and
rollout engine on top of the first agent's overflow an 80 GB card, and two agents updating at once on one device
add their working memory. The rules (each has a test in tests/test_device_placement.py):

- no visible GPU: every agent on ``cpu`` (host memory: agents keep overlapping, ``train.parallel_agents``);
- G ≥ N visible devices: agent i gets its own block of G // N consecutive devices; leftover devices are named;
- G < N: agent i goes on device i mod G, and the agents on one device take turns (one lane, no overlap), each
  idle one keeping its optimizer state and fp32 masters in host memory (:mod:`corl_vl.train.offload`);
- ``agents[i].devices`` overrides; the other agents are placed by the same rules over the visible devices no
  override names (over all of them when the overrides name every one).

One process trains an agent on its block's first device; a whole block is what a multi-process launch
(``distributed.deepspeed``) turns into one rank per GPU. Only the visible devices are taken in turns: a ``cpu``
override is host memory. Tests inject the visible list (e.g. ``["cpu"]``) to exercise turn-taking on a CPU.
No torch at import. The device names themselves are checked with the config (:func:`corl_vl.config_checks.check_device_names`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from corl_vl.config_checks import normalise_device
from corl_vl.errors import CorlError


@dataclass
class DevicePlacement:
    """Per agent (config order): its devices, and the visible slot each device is (None: not a visible one)."""

    names: list[str]
    devices: list[list[str]]
    slots: list[list[int | None]]
    leftover: list[str]

    def home(self, agent: int) -> str:
        """The device the agent's model trains on in one process (its block's first)."""
        return self.devices[agent][0]

    def lanes(self) -> list[list[int]]:
        """Agents grouped by the visible device they train on, in order of first appearance; an agent off the
        visible devices (a ``cpu`` fallback or override) is a lane of its own."""
        lanes: dict[Any, list[int]] = {}
        for i, slots in enumerate(self.slots):
            key = slots[0] if slots[0] is not None else ("own", i)
            lanes.setdefault(key, []).append(i)
        return list(lanes.values())

    def takes_turns(self, agent: int) -> list[int]:
        """The other agents that share this agent's device (empty when it has the device to itself)."""
        lane = next(lane for lane in self.lanes() if agent in lane)
        return [i for i in lane if i != agent]

    @property
    def shared(self) -> bool:
        return any(len(lane) > 1 for lane in self.lanes())

    def lines(self) -> list[str]:
        """What the first log lines of a run say about it."""
        out = []
        for i, name in enumerate(self.names):
            line = f"placement: agent {name} on {', '.join(self.devices[i])}"
            others = self.takes_turns(i)
            if others:
                line += (
                    f" (takes turns with {', '.join(self.names[j] for j in others)}; its optimizer state and "
                    "fp32 masters wait in CPU memory between turns)"
                )
            if len(self.devices[i]) > 1:
                line += (
                    f"; one process trains on {self.home(i)} (set distributed.deepspeed for one rank per GPU)"
                )
            out.append(line)
        if self.leftover:
            out.append(f"placement: no agent uses {', '.join(self.leftover)}")
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "agents": {name: list(d) for name, d in zip(self.names, self.devices)},
            "takes_turns": {
                n: [self.names[j] for j in self.takes_turns(i)] for i, n in enumerate(self.names)
            },
            "leftover": list(self.leftover),
        }


def place_agents(
    names: Sequence[str], requested: Sequence[Sequence[str] | None], visible: Sequence[str]
) -> DevicePlacement:
    """Each agent's devices over the ``visible`` ones (module docstring); ``requested``: ``agents[i].devices``."""
    visible = list(visible)
    shown = ", ".join(visible) or "none (no GPU visible)"
    slot_of = {}
    for slot, name in enumerate(visible):
        slot_of.setdefault(name, slot)
    devices: list[list[str] | None] = [None] * len(names)
    slots: list[list[int | None]] = [[] for _ in names]
    claimed: set[int] = set()
    for i, wanted in enumerate(requested):
        if wanted is None:
            continue
        chosen = []
        for raw in wanted:
            name = normalise_device(raw)
            if name is None:
                raise CorlError(f"agents.{i}.devices: '{raw}' is not a device name; use cpu, cuda or cuda:N")
            if name != "cpu" and name not in slot_of:
                raise CorlError(
                    f"agents.{i}.devices: {name} is not a visible device (visible: {shown}); name one of those "
                    "or leave agents[i].devices out"
                )
            chosen.append(name)
        devices[i] = chosen
        slots[i] = [slot_of.get(name) for name in chosen]
        claimed.update(s for s in slots[i] if s is not None)
    auto = [i for i, d in enumerate(devices) if d is None]
    free = [s for s in range(len(visible)) if s not in claimed]
    used = set(claimed)
    if not visible:
        for i in auto:
            devices[i], slots[i] = ["cpu"], [None]
    elif free and len(free) >= len(auto):
        block = len(free) // max(len(auto), 1)
        for k, i in enumerate(auto):
            slots[i] = list(free[k * block : (k + 1) * block])
            devices[i] = [visible[s] for s in slots[i]]
            used.update(slots[i])
    else:  # fewer devices than agents (or every one named by an override): one each, shared in turns
        free = free or list(range(len(visible)))
        for k, i in enumerate(auto):
            slots[i] = [free[k % len(free)]]
            devices[i] = [visible[slots[i][0]]]
            used.update(slots[i])
    leftover = [visible[s] for s in range(len(visible)) if s not in used and visible[s] not in visible[:s]]
    return DevicePlacement(list(names), [list(d or []) for d in devices], slots, leftover)


def visible_devices() -> list[str]:
    """The CUDA devices this process sees (``cuda:0`` …); empty without a GPU."""
    # lazy: torch
    import torch

    return [f"cuda:{i}" for i in range(torch.cuda.device_count())] if torch.cuda.is_available() else []


def placement_for(agents: Sequence[Any], visible: Sequence[str] | None = None) -> DevicePlacement:
    """The placement of ``agents`` (the config's ``agents``) over ``visible`` (default: the GPUs this process
    sees)."""
    seen = visible_devices() if visible is None else list(visible)
    return place_agents([a.name for a in agents], [a.devices for a in agents], seen)
