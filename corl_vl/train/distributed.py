"""One launch, the whole cohort: agents on disjoint rank groups, each a DeepSpeed engine, answers by collectives.

Why this shape: Co-RL couples agents only through their *answers*, which are
small, so the cohort needs no shared parameters and no files on disk — one ``torchrun`` / ``accelerate launch``
owns every agent, each agent trains as a DeepSpeed ZeRO-2/3 engine over its own rank group (its data-parallel
group), and after each rollout the answers travel between groups by one ``all_gather_object`` over WORLD.

The facts this module is built on (deepspeed 0.19.8; docs/reference.md#runtime-behaviour-the-trainer-relies-on):

- every rank must create every agent's group with ``dist.new_group`` in the same order (group creation is a
  collective), plus one single-rank group per rank;
- ``deepspeed.initialize`` must get an ``mpu`` whose data-parallel group is the agent's group and whose
  model-parallel group is the rank's *single-rank* group (``None`` would mean WORLD inside ``deepspeed.comm``).
  Without it DeepSpeed reduces gradients and broadcasts initial weights over WORLD: two agents of the same
  architecture then silently mix gradients. :func:`deepspeed_engine` refuses to build an engine without one;
- ``deepspeed.utils.groups.mpu`` is process-wide, so a multi-process run hosts exactly one agent per process;
- ZeRO-3's trace-consistency check broadcasts over WORLD from global rank 0; :func:`scope_zero3_checks` moves it
  into the agent's group (the no-grad passes that would desynchronise it are handled in :mod:`corl_vl.train.agent`).

Placement (which ranks each agent gets, node-aware, per-agent counts) is :mod:`corl_vl.train.placement`. Data
split inside a group: the group's ranks split the step's problem ids (contiguous shares; with rollout tensor
parallelism each TP group's share, then each rank's part of it); every rank still sees every agent's answers
for *all* ids after the exchange, so pseudo-labels and rewards are computed identically everywhere.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from corl_vl.errors import CorlError
from corl_vl.train.deepspeed_setup import AgentMPU
from corl_vl.train.placement import Placement, nodes_from_ranks, place


# ---------------------------------------------------------------------------------------------- shares
def share(ids: Sequence[str], group_rank: int, group_size: int) -> list[str]:
    """This group member's contiguous share of ``ids`` (sizes differ by at most one, earlier ranks larger)."""
    base, extra = divmod(len(ids), group_size)
    start = group_rank * base + min(group_rank, extra)
    return list(ids[start : start + base + (1 if group_rank < extra else 0)])


# ---------------------------------------------------------------------------------------------- context
@dataclass
class DistContext:
    """This process's place in the cohort: its rank, its agent, that agent's group and mpu."""

    rank: int
    world_size: int
    groups: list[list[int]]  # global ranks per agent, in config order
    agent_index: int  # the one agent this process hosts
    dp_group: Any
    mpu: AgentMPU
    placement: Placement | None = None  # None: the agents' groups were given directly (tests)

    @property
    def group_ranks(self) -> list[int]:
        return self.groups[self.agent_index]

    @property
    def group_rank(self) -> int:
        return self.group_ranks.index(self.rank)

    @property
    def group_size(self) -> int:
        return len(self.group_ranks)

    @property
    def is_main(self) -> bool:
        """Global rank 0: run-level files (config, cohort state, plots) and the progress bar."""
        return self.rank == 0

    @property
    def is_group_leader(self) -> bool:
        """Group rank 0 writes its agent's HF folder and metrics."""
        return self.group_rank == 0

    @property
    def tp_size(self) -> int:
        return self.placement.tensor_parallel_size if self.placement is not None else 1

    def rollout_share(self, ids: Sequence[str]) -> list[str]:
        """The ids this rank's vLLM tensor-parallel group generates (every rank of a TP group: the same ids)."""
        tp = self.tp_size
        return share(ids, self.group_rank // tp, self.group_size // tp)

    def my_share(self, ids: Sequence[str]) -> list[str]:
        """The ids this rank trains on: its part of its TP group's rollout share (all of it when T = 1)."""
        tp = self.tp_size
        return share(self.rollout_share(ids), self.group_rank % tp, tp)

    def barrier(self) -> None:
        import torch.distributed as dist

        dist.barrier()

    def exchange(
        self, ids: Sequence[str], local: dict[str, dict[str, list[Any]]], names: Sequence[str]
    ) -> dict[str, dict[str, list[Any]]]:
        """All agents' answers for all ``ids``, from every rank's ``{agent: {problem_id: [answers]}}`` shares.

        One ``all_gather_object`` over WORLD (answers are small). Verified by id: every rank must have drawn
        the same ids, and each agent's group must report every id exactly once — a rank that sampled other
        problems or lost one is an error, not a silently shifted label.
        """
        import torch.distributed as dist

        mine = {"rank": self.rank, "ids": list(ids), "answers": local}
        gathered: list[Any] = [None] * self.world_size
        dist.all_gather_object(gathered, mine)
        out: dict[str, dict[str, list[Any]]] = {name: {} for name in names}
        for item in gathered:
            if item["ids"] != list(ids):
                raise CorlError(
                    f"distributed: rank {item['rank']} drew problems {item['ids']}, rank {self.rank} drew {list(ids)}"
                )
            for agent, answers in item["answers"].items():
                for pid, values in answers.items():
                    if pid in out[agent]:
                        raise CorlError(f"distributed: agent {agent} answered {pid!r} on two ranks")
                    out[agent][pid] = values
        for agent, answers in out.items():
            if set(answers) != set(ids):
                missing = sorted(set(ids) - set(answers)) or sorted(set(answers) - set(ids))
                raise CorlError(
                    f"distributed: agent {agent}'s answers do not cover this step's ids ({missing[:3]})"
                )
            out[agent] = {pid: answers[pid] for pid in ids}
        return out

    def gather_objects(self, obj: Any) -> list[Any]:
        """Every rank's ``obj`` (WORLD), in rank order."""
        import torch.distributed as dist

        gathered: list[Any] = [None] * self.world_size
        dist.all_gather_object(gathered, obj)
        return gathered


def launched_world_size() -> int:
    """WORLD_SIZE set by torchrun / accelerate launch (1 when started as a plain process)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def node_id() -> str:
    """Which node this process runs on: torchrun's node rank (GROUP_RANK; also with simulated nodes on one
    machine), else the host name."""
    import socket

    return os.environ.get("GROUP_RANK") or socket.gethostname()


def setup(
    requests: Sequence[int | None],
    *,
    names: Sequence[str] | None = None,
    tensor_parallel_size: int = 1,
    backend: str = "auto",
) -> DistContext:
    """Join the launch's process group, place the agents on its nodes (:mod:`corl_vl.train.placement`; every
    rank computes the same plan from the same gathered node ids), create every agent's group (same order on
    every rank), build the mpu. ``requests``: each agent's ``gpus`` (None: an equal share)."""
    import torch
    import torch.distributed as dist

    if not dist.is_initialized():
        if backend == "auto":
            backend = "nccl" if torch.cuda.is_available() else "gloo"
        if backend == "nccl":
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        dist.init_process_group(backend=backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    node_ids: list[Any] = [None] * world
    dist.all_gather_object(node_ids, node_id())
    plan = place(requests, nodes_from_ranks(node_ids), tensor_parallel_size=tensor_parallel_size, names=names)
    plan.refuse_idle()
    groups = plan.groups
    dp_groups = [dist.new_group(ranks) for ranks in groups]  # collective: every rank, same order
    singles = [dist.new_group([r]) for r in range(world)]
    agent = next(i for i, ranks in enumerate(groups) if rank in ranks)
    mpu = AgentMPU(dp_groups[agent], groups[agent], singles[rank], rank)
    return DistContext(rank, world, groups, agent, dp_groups[agent], mpu, plan)
