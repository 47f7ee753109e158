"""The cohort's control plane: what the agents' processes tell each other, as JSON through one key-value store.

Why not a collective over one process group: on GPUs each agent runs in its own ``torch.distributed`` world (its
own NCCL communicators, vLLM engine and DeepSpeed engine, :mod:`corl_vl.train.distributed`), and NCCL serves CUDA
tensors only. What crosses agents is small CPU data — problem ids, answers, labels, stop and non-finite flags,
node names — so it travels as JSON through the launch's ``TCPStore`` (the one torchrun already runs), never as a
tensor and never as a pickle (a message read from a socket must not be able to run code). Anything that is not
plain JSON data (a tensor, an object) is refused with one line: the control plane carries CPU data only.

Each exchange is numbered; every process calls the same exchanges in the same order (as with collectives). A
process deletes its own key of the previous exchange once all keys of the current one are there, since by then
every process has read the previous one.
"""

from __future__ import annotations

import datetime
import json
import os
from typing import Any

from corl_vl.errors import CorlError

# how long a process waits for its peers at an exchange: a peer may be generating or training a whole turn
DEFAULT_TIMEOUT_S = 6 * 3600


def control_timeout() -> datetime.timedelta:
    """``CORL_VL_CONTROL_TIMEOUT_S`` seconds (default 6 h): a peer that died is reported by the launcher first."""
    raw = os.environ.get("CORL_VL_CONTROL_TIMEOUT_S", str(DEFAULT_TIMEOUT_S))
    try:
        seconds = float(raw)
    except ValueError:
        raise CorlError(f"CORL_VL_CONTROL_TIMEOUT_S={raw!r}: expected a number of seconds") from None
    return datetime.timedelta(seconds=seconds)


def to_json(value: Any, what: str) -> str:
    """``value`` as JSON, or one line saying the control plane takes plain CPU data only."""
    try:
        return json.dumps(value, allow_nan=True)
    except (TypeError, ValueError) as err:
        raise CorlError(
            f"control plane: {what} is not plain data ({err}); it carries JSON values (ids, answers, flags) only, "
            "never tensors"
        ) from None


class ControlPlane:
    """Numbered all-gathers, barriers and flag votes over a ``torch.distributed.Store`` among ``size`` processes.

    ``rank``: this process's place in the cohort (0 … size − 1); ``store``: any store every process reaches
    (a ``TCPStore``, or a ``HashStore`` in one process).
    """

    def __init__(
        self, store: Any, rank: int, size: int, *, timeout: datetime.timedelta | None = None
    ) -> None:
        if not 0 <= rank < size:
            raise CorlError(f"control plane: rank {rank} outside a cohort of {size} processes")
        self.store, self.rank, self.size = store, rank, size
        self.timeout = timeout or control_timeout()
        self.exchanges = 0  # how many exchanges this process has taken part in (the next one's number)

    def _key(self, number: int, rank: int) -> str:
        return f"corl_vl/control/{number}/{rank}"

    def all_gather(self, value: Any, what: str = "a value") -> list[Any]:
        """Every process's ``value``, in rank order (all processes call it, in the same order)."""
        number = self.exchanges
        self.exchanges += 1
        self.store.set(self._key(number, self.rank), to_json(value, what))
        keys = [self._key(number, r) for r in range(self.size)]
        try:
            self.store.wait(keys, self.timeout)
        except Exception as err:  # the store's own timeout / closed-connection errors
            raise CorlError(
                f"control plane: waited {self.timeout} for the other processes at exchange {number} ({what}); "
                f"one of them stopped or hangs ({type(err).__name__}: {err})"
            ) from None
        values = [json.loads(self.store.get(key)) for key in keys]
        if number > 0:  # every process has read exchange number − 1: it wrote a key of this one after that
            self.store.delete_key(self._key(number - 1, self.rank))
        return values

    def barrier(self) -> None:
        """Every process reached this point."""
        self.all_gather(None, "a barrier")

    def any(self, flag: bool, what: str = "a flag") -> bool:
        """True on every process when any process's ``flag`` is true (a stop vote)."""
        return any(self.all_gather(bool(flag), what))
