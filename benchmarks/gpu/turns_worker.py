"""One process of the ``pair_turns`` check: the real ``corl-vl train`` (its CLI function), with probes around it.

Usage (under torch's launcher, as ``corl-vl train`` starts itself on one GPU, with ``CORL_VL_NODE_GPUS=1``)::

    python -m torch.distributed.run --standalone --nproc_per_node=2 turns_worker.py OUT [--no-checkpoint] \\
        -- train --config cohort.yaml --no-progress

The probes only observe, except ``--no-checkpoint`` (the final checkpoint of two full-size agents, weights and
AdamW state, would write tens of GB onto a lent node's small disk; it is recorded as skipped):

- every turn this process takes on its GPU (``DeviceTurns.turn``): ``enter``/``exit`` lines in ``OUT/turns.log``
  (under a file lock, while the baton is held), and on CUDA the memory allocated when it starts, its peak
  allocated and reserved, and the whole GPU's used memory as it ends (both processes and their CUDA contexts);
- every control-plane exchange (``ControlPlane.all_gather``): what it was for, its JSON size, and whether the
  value was plain JSON data (ids, answers, flags) before the plane serialised it;
- the idle agent's state offloads (``TurnOffload``): how many, how many reloads, the bytes moved;
- the agent's world: the backend ``init_process_group`` built, and the device of every tensor that entered a
  tensor collective (NCCL serves CUDA tensors only; gloo is the CPU's).

Writes ``OUT/rank-<cohort rank>.json``; exits with the CLI's exit code.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # this checkout's corl_vl

RANK = int(
    os.environ.get("RANK", "0")
)  # torchrun's cohort rank; setup() later sets RANK to the agent's world
GIB = 2**30
COLLECTIVES = (
    "all_reduce",
    "broadcast",
    "reduce",
    "all_gather",
    "all_gather_into_tensor",
    "reduce_scatter_tensor",
    "all_to_all_single",
    "send",
    "recv",
)


def plain(value: Any) -> bool:
    """Whether ``value`` is plain JSON data: None, bool, number, string, and lists / dicts of them."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return True
    if isinstance(value, (list, tuple)):
        return all(plain(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, (str, int, float, bool)) and plain(v) for k, v in value.items())
    return False


def _tensor_devices(args: Any) -> list[str]:
    import torch

    found = []
    for a in args:
        if isinstance(a, torch.Tensor):
            found.append(a.device.type)
        elif isinstance(a, (list, tuple)):
            found += _tensor_devices(a)
    return found


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def probe_turns(record: dict[str, Any], log: Path) -> None:
    """Wrap ``DeviceTurns.turn``: the turn's order in ``log`` and, on CUDA, its memory (module docstring)."""
    import torch

    from corl_vl.train.device_turns import DeviceTurns

    inner = DeviceTurns.turn
    peaks = record["peak"]

    def write(line: str) -> None:
        with log.open("a") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            f.write(line + "\n")

    @contextlib.contextmanager
    def turn(self: Any, label: str) -> Any:
        with inner(self, label):
            me = self.members[self.position]
            write(f"enter {me} {label}")
            entry: dict[str, Any] = {"label": label}
            cuda = _cuda()
            if cuda:  # fold the peak so far into the run's, then measure this turn alone
                torch.cuda.synchronize()
                peaks["allocated"] = max(peaks["allocated"], torch.cuda.max_memory_allocated())
                peaks["reserved"] = max(peaks["reserved"], torch.cuda.max_memory_reserved())
                torch.cuda.reset_peak_memory_stats()
                entry["start_allocated_gib"] = torch.cuda.memory_allocated() / GIB
            try:
                yield
            finally:
                if cuda:
                    torch.cuda.synchronize()
                    free, total = torch.cuda.mem_get_info()
                    entry.update(
                        peak_allocated_gib=torch.cuda.max_memory_allocated() / GIB,
                        peak_reserved_gib=torch.cuda.max_memory_reserved() / GIB,
                        end_reserved_gib=torch.cuda.memory_reserved() / GIB,
                        device_used_gib=(total - free) / GIB,
                    )
                record["turns"].append(entry)
                write(f"exit {me} {label}")

    DeviceTurns.turn = turn


def probe_control_plane(record: dict[str, Any]) -> None:
    """Wrap ``ControlPlane.all_gather``: count the exchanges, their purposes and sizes, and non-JSON values."""
    from corl_vl.train.control_plane import ControlPlane

    inner = ControlPlane.all_gather
    plane = record["control_plane"]
    purposes: Counter[str] = Counter()

    def all_gather(self: Any, value: Any, what: str = "a value") -> list[Any]:
        plane["exchanges"] += 1
        purposes[what] += 1
        plane["purposes"] = dict(purposes)
        plane["order"].append(what)
        if not plain(value):
            plane["not_plain"].append(f"{what}: {type(value).__name__}")
        else:
            plane["bytes"] += len(json.dumps(value))
        return inner(self, value, what)

    ControlPlane.all_gather = all_gather


def probe_agent_world(record: dict[str, Any]) -> None:
    """Wrap ``init_process_group`` (the backend it built) and the tensor collectives (their tensors' devices)."""
    import torch.distributed as dist

    world = record["agent_world"]
    init = dist.init_process_group

    def init_process_group(*args: Any, **kwargs: Any) -> Any:
        out = init(*args, **kwargs)
        world.update(backend=str(dist.get_backend()), size=dist.get_world_size())
        return out

    dist.init_process_group = init_process_group
    devices: Counter[str] = Counter()

    def wrap(name: str) -> None:
        fn = getattr(dist, name)

        def collective(*args: Any, **kwargs: Any) -> Any:
            for device in _tensor_devices([*args, *kwargs.values()]):
                devices[f"{name}:{device}"] += 1
            world["tensor_collectives"] = dict(devices)
            return fn(*args, **kwargs)

        setattr(dist, name, collective)

    for name in COLLECTIVES:
        if hasattr(dist, name):
            wrap(name)


def probe_setup(record: dict[str, Any]) -> None:
    """Wrap ``distributed.setup``: which agent this process hosts, its device, whom it shares the GPU with."""
    from corl_vl.train import distributed

    inner = distributed.setup

    def setup(requests: Any, **kwargs: Any) -> Any:
        ctx = inner(requests, **kwargs)
        names = list(kwargs.get("names") or [])
        record.update(
            agent=names[ctx.agent_index] if names else str(ctx.agent_index),
            cohort_rank=ctx.rank,
            cohort_size=ctx.world_size,
            device=ctx.device,
            shares_gpu_with=list(ctx.turns.members) if ctx.turns is not None else [],
            takes_turns=ctx.takes_turns,
        )
        return ctx

    distributed.setup = setup


def probe_offload(record: dict[str, Any]) -> None:
    """Wrap ``TurnOffload.offload``: what the idle agent's state (fp32 masters, AdamW) moved to host memory."""
    from corl_vl.train.offload import TurnOffload

    inner = TurnOffload.offload

    def offload(self: Any) -> int:
        moved = inner(self)
        done = record["offload"]
        done.update(offloads=done["offloads"] + 1, reloads=self.turns, moved_gib=self.moved_bytes / GIB)
        return moved

    TurnOffload.offload = offload


def skip_checkpoint(record: dict[str, Any]) -> None:
    from corl_vl.train import callbacks

    def save_checkpoint(run_dir: Any, cohort: Any) -> None:
        record["checkpoints_skipped"] += 1

    callbacks.save_checkpoint = save_checkpoint


def main(argv: list[str]) -> int:
    out = Path(argv[0])
    split = argv.index("--")
    options, train_args = argv[1:split], argv[split + 1 :]
    record: dict[str, Any] = {
        "rank": RANK,
        "turns": [],
        "peak": {"allocated": 0, "reserved": 0},
        "control_plane": {"exchanges": 0, "bytes": 0, "purposes": {}, "order": [], "not_plain": []},
        "agent_world": {"backend": None, "size": None, "tensor_collectives": {}},
        "checkpoints_skipped": 0,
        "offload": {"offloads": 0, "reloads": 0, "moved_gib": 0.0},
        "node_gpus": os.environ.get("CORL_VL_NODE_GPUS"),
    }
    probe_agent_world(record)  # before corl_vl imports torch.distributed's names
    probe_control_plane(record)
    probe_turns(record, out / "turns.log")
    probe_setup(record)
    probe_offload(record)
    if "--no-checkpoint" in options:
        skip_checkpoint(record)
    from corl_vl.cli import main as cli

    t0 = time.perf_counter()
    code = cli(train_args)
    record.update(exit_code=code, seconds=time.perf_counter() - t0)
    if _cuda():
        import torch

        peaks = record["peak"]
        record.update(
            device_name=torch.cuda.get_device_name(0),
            peak_allocated_gib=max(peaks["allocated"], torch.cuda.max_memory_allocated()) / GIB,
            peak_reserved_gib=max(peaks["reserved"], torch.cuda.max_memory_reserved()) / GIB,
        )
    (out / f"rank-{RANK}.json").write_text(json.dumps(record, indent=1))
    return code


if __name__ == "__main__":
    status = main(sys.argv[1:])
    # the record is written: skip the interpreter's teardown of torch/transformers (2-5 s per process on CPU)
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(int(status or 0))
