"""Processes that share one GPU take turns: a baton on the control plane's store decides who runs.

Why: with fewer GPUs than agents (the 1-GPU pair), each agent still runs in its own process (vLLM's sleep
allocator is one per process), so two processes share the device. vLLM refuses to start while another engine
holds the memory it asks for, and two trainers' activations would not fit beside each other, so at any time only
one process on a device is *active*: building its model and engine, generating, or updating. Between its turns an
agent's engine sleeps and its optimizer state waits in host memory (:mod:`corl_vl.train.offload`).

The order is fixed — the device's members in cohort-rank order, round after round — so a run is reproducible
and every member takes the same number of turns (turns sit at fixed points of the step, not where work happens
to exist). Turn ``n`` of a device (counted over all its members) starts when key ``…/n`` exists; its holder
sets ``…/n+1`` when it is done. A turn never contains a control-plane exchange: the other members wait for the
baton, so an exchange inside a turn would wait forever.
"""

from __future__ import annotations

import contextlib
import datetime
from collections.abc import Iterator, Sequence
from typing import Any

from corl_vl.errors import CorlError
from corl_vl.train.backends import TorchBackend
from corl_vl.train.control_plane import control_timeout
from corl_vl.train.offload import TurnOffload


class DeviceTurns:
    """The baton of one device among ``members`` (cohort ranks, in turn order); ``rank`` is this process."""

    def __init__(
        self,
        store: Any,
        device: str,
        members: Sequence[int],
        rank: int,
        *,
        timeout: datetime.timedelta | None = None,
    ) -> None:
        if rank not in members:
            raise CorlError(f"device turns: rank {rank} is not among {device}'s processes {list(members)}")
        self.store, self.device = store, device
        self.members, self.position = list(members), list(members).index(rank)
        self.timeout = timeout or control_timeout()
        self.rounds = 0  # turns this process has completed
        self.current: str | None = None  # the turn this process is inside now (for error lines)

    @property
    def shared(self) -> bool:
        """Whether another process uses this device (else a turn costs nothing)."""
        return len(self.members) > 1

    def _key(self, number: int) -> str:
        return f"corl_vl/turns/{self.device}/{number}"

    @contextlib.contextmanager
    def turn(self, label: str) -> Iterator[None]:
        """This process's next turn on its device: waits for the baton, runs the body, passes the baton on
        (also after an error, so that the other members report their own state instead of hanging)."""
        if self.current is not None:
            raise CorlError(
                f"device turns: a turn for {label!r} started inside the turn for {self.current!r}"
            )
        number = self.rounds * len(self.members) + self.position
        if self.shared and number > 0:
            try:
                self.store.wait([self._key(number)], self.timeout)
            except Exception as err:
                raise CorlError(
                    f"device turns: waited {self.timeout} for the turn before ours on {self.device} ({label}); the "
                    f"process holding it stopped or hangs ({type(err).__name__})"
                ) from None
        self.current = label
        try:
            yield
        finally:
            self.current = None
            self.rounds += 1
            if self.shared:
                self.store.set(self._key(number + 1), label)
                if number > 0:  # the key that let this turn start has served its purpose
                    self.store.delete_key(self._key(number))


def process_turn(dist: Any, label: str) -> contextlib.AbstractContextManager[None]:
    """This process's turn on its GPU when it shares one (a multi-process launch), else nothing to wait for."""
    if dist is None or not dist.takes_turns:
        return contextlib.nullcontext()
    return dist.turns.turn(label)


def leave_shared_device(agent: Any, dist: Any) -> Any:
    """End a build turn on a shared GPU: the agent's engine sleeps and (Torch backend, no ``optimizer.offload``)
    its optimizer state and fp32 masters go to host memory until its first update; returns that
    :class:`~corl_vl.train.offload.TurnOffload`, or None. A DeepSpeed agent offloads through its own config."""
    if dist is None or not dist.takes_turns:
        return None
    agent.release_engine()
    if agent.settings.optimizer.offload != "none" or not isinstance(agent.backend, TorchBackend):
        return None
    offload = TurnOffload(agent.backend.optimizer, agent.model)
    offload.offload()
    return offload
