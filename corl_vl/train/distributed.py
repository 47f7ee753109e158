"""The GPU process model: one ``torch.distributed`` world per agent, a CPU control plane for the cohort.

Why this shape (docs/gpu.md): a process hosts one agent, because vLLM's sleep allocator and DeepSpeed's ``mpu``
are process-wide; and no process group spans two agents, because NCCL serves CUDA tensors only, vLLM's
``external_launcher`` takes WORLD as its own tensor-parallel world and ZeRO-3 checks its module trace over WORLD.
So every process of a launch (``torchrun``, or ``corl-vl train`` starting its own processes) joins:

- its **agent's world**: ``init_process_group`` over only that agent's processes (NCCL on GPUs, gloo on the CPU),
  created through the launch's store under the agent's own prefix; DeepSpeed, vLLM and every tensor collective
  of the agent live there, and see it as WORLD;
- the **cohort's control plane** (:mod:`corl_vl.train.control_plane`): JSON through the launch's ``TCPStore``
  for what crosses agents — node names, problem ids, answers, labels, stop/non-finite/stall flags, barriers;
- with fewer GPUs than processes, a **baton** per GPU (:mod:`corl_vl.train.device_turns`): its processes take
  turns, one active at a time.

Which ranks each agent gets (node-aware, per-agent counts, tensor-parallel blocks) is
:mod:`corl_vl.train.rank_placement`; which GPU a process uses is its place on its node modulo the node's GPU count
(``CORL_VL_NODE_GPUS``, set by corl-vl's launchers; else one process per GPU). Inside an agent the processes
split the step's problem ids (contiguous shares; with rollout tensor parallelism each TP group's share, then each
rank's part of it); every process still sees every agent's answers for *all* ids after the exchange, so
pseudo-labels and rewards are computed identically everywhere.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from corl_vl.errors import CorlError
from corl_vl.train.control_plane import ControlPlane
from corl_vl.train.deepspeed_setup import AgentMPU
from corl_vl.train.device_turns import DeviceTurns
from corl_vl.train.rank_placement import Placement, nodes_from_ranks, place

# GPUs per node the processes are spread over (set by corl-vl's launchers)
NODE_GPUS_ENV = "CORL_VL_NODE_GPUS"


# ---------------------------------------------------------------------------------------------- shares
def share(ids: Sequence[str], group_rank: int, group_size: int) -> list[str]:
    """This group member's contiguous share of ``ids`` (sizes differ by at most one, earlier ranks larger)."""
    base, extra = divmod(len(ids), group_size)
    start = group_rank * base + min(group_rank, extra)
    return list(ids[start : start + base + (1 if group_rank < extra else 0)])


# ---------------------------------------------------------------------------------------------- context
@dataclass
class DistContext:
    """This process's place in the cohort: its cohort rank, its agent, that agent's world and mpu, the control
    plane to the other agents, and the baton of its GPU when it shares one."""

    rank: int  # in the cohort (every process of the launch), not in the agent's world
    world_size: int  # processes in the cohort
    groups: list[list[int]]  # cohort ranks per agent, in config order
    agent_index: int  # the one agent this process hosts
    dp_group: Any  # the agent's world (WORLD of this process's torch.distributed)
    mpu: AgentMPU | None
    placement: Placement | None = None  # None: the agents' groups were given directly (tests)
    control: ControlPlane | None = None  # None only in tests that build a context by hand
    turns: DeviceTurns | None = None  # None: this process has its device to itself
    device: str = "cpu"  # where this process's agent computes

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
        """Cohort rank 0: run-level files (config, cohort state, plots) and the progress bar."""
        return self.rank == 0

    @property
    def is_group_leader(self) -> bool:
        """Group rank 0 writes its agent's HF folder and metrics."""
        return self.group_rank == 0

    @property
    def tp_size(self) -> int:
        return self.placement.tensor_parallel_size if self.placement is not None else 1

    @property
    def takes_turns(self) -> bool:
        """Whether another process shares this process's GPU (then it acts only in its turns)."""
        return self.turns is not None and self.turns.shared

    def rollout_share(self, ids: Sequence[str]) -> list[str]:
        """The ids this rank's vLLM tensor-parallel group generates (every rank of a TP group: the same ids)."""
        tp = self.tp_size
        return share(ids, self.group_rank // tp, self.group_size // tp)

    def my_share(self, ids: Sequence[str]) -> list[str]:
        """The ids this rank trains on: its part of its TP group's rollout share (all of it when T = 1)."""
        tp = self.tp_size
        return share(self.rollout_share(ids), self.group_rank % tp, tp)

    def _plane(self) -> ControlPlane:
        if self.control is None:
            raise CorlError("distributed: this context has no control plane (built by hand)")
        return self.control

    def barrier(self) -> None:
        """Every process of the cohort reached this point (control plane, no tensor)."""
        self._plane().barrier()

    def any_flag(self, flag: bool, what: str) -> bool:
        """True everywhere when any process's ``flag`` is (stop votes: non-finite, stall, signals)."""
        return self._plane().any(flag, what)

    def gather_objects(self, obj: Any) -> list[Any]:
        """Every process's ``obj`` (plain JSON data), in cohort-rank order."""
        return self._plane().all_gather(obj)

    def exchange(
        self, ids: Sequence[str], local: dict[str, dict[str, list[Any]]], names: Sequence[str]
    ) -> dict[str, dict[str, list[Any]]]:
        """All agents' answers for all ``ids``, from every rank's ``{agent: {problem_id: [answers]}}`` shares.

        One all-gather on the control plane (answers are small). Verified by id: every rank must have drawn
        the same ids, and each agent's group must report every id exactly once — a rank that sampled other
        problems or lost one is an error, not a silently shifted label.
        """
        mine = {"rank": self.rank, "ids": list(ids), "answers": local}
        gathered = self._plane().all_gather(mine, "the step's answers")
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


def launched_world_size() -> int:
    """Processes in the launch: torchrun's WORLD_SIZE (1 when started as a plain process). After :func:`setup`
    WORLD_SIZE is the agent's world (what vLLM reads), and the cohort's size is kept beside it."""
    return int(os.environ.get("CORL_VL_COHORT_SIZE") or os.environ.get("WORLD_SIZE", "1"))


def node_id() -> str:
    """Which node this process runs on: torchrun's node rank (GROUP_RANK; also with simulated nodes on one
    machine), else the host name."""
    return os.environ.get("GROUP_RANK") or socket.gethostname()


# ---------------------------------------------------------------------------------------------- devices
def node_gpu_count(env: dict[str, str] | None = None) -> int:
    """GPUs per node the processes are spread over: ``CORL_VL_NODE_GPUS`` (corl-vl's launchers set it), else the
    GPUs torch sees (read through NVML where it can, which does not initialise CUDA), else 0 (CPU)."""
    env = os.environ if env is None else env
    raw = env.get(NODE_GPUS_ENV)
    if raw:
        if not raw.isdigit():
            raise CorlError(f"{NODE_GPUS_ENV}={raw!r}: expected a number of GPUs per node")
        return int(raw)

    return torch.cuda.device_count() if torch.backends.cuda.is_built() else 0


def device_slots(nodes: Sequence[Sequence[int]], gpus_per_node: int) -> dict[int, tuple[str, int]]:
    """Each cohort rank's GPU: ``{rank: (device key, GPU index on its node)}``. A process's GPU is its place on
    its node modulo the node's GPUs, so with fewer GPUs than processes they share round-robin (agent i on GPU
    i mod G for one process per agent). Empty without GPUs."""
    if gpus_per_node <= 0:
        return {}
    slots = {}
    for node, ranks in enumerate(nodes):
        for local, rank in enumerate(ranks):
            gpu = local % gpus_per_node
            slots[rank] = (f"node{node}-gpu{gpu}", gpu)
    return slots


def pin_gpu(gpu: int, env: dict[str, str] | None = None) -> None:
    """Make ``gpu`` (an index among the GPUs this process was started with) its only visible GPU, as
    ``cuda:0``, before CUDA starts: vLLM builds its engine on ``cuda:LOCAL_RANK`` (external launcher) or
    ``cuda:0`` (one process), and a process that shares its GPU must not build on another one."""
    env = os.environ if env is None else env
    if torch.cuda.is_initialized():
        raise CorlError(
            "distributed: CUDA was initialised before corl-vl placed this process on its GPU; start "
            "`corl-vl train` directly under torchrun (nothing may touch CUDA first)"
        )
    visible = [d for d in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    env["CUDA_VISIBLE_DEVICES"] = visible[gpu] if gpu < len(visible) else str(gpu)
    env["LOCAL_RANK"] = "0"


def _join_agent_world(store: Any, agent: int, group_rank: int, group_size: int, backend: str) -> str:
    """``init_process_group`` over this agent's processes only (their own prefix of the launch's store);
    returns where the agent computes."""
    if backend == "auto":
        backend = "nccl" if torch.cuda.is_available() else "gloo"
    cuda = "cuda" in dist.Backend.backend_capability.get(backend, []) and torch.cuda.is_available()
    if cuda:
        torch.cuda.set_device(0)  # the pinned GPU (or, unpinned, the first visible one)
    prefixed = dist.PrefixStore(f"corl_vl/agent/{agent}", store)
    dist.init_process_group(backend=backend, store=prefixed, rank=group_rank, world_size=group_size)
    return f"cuda:{torch.cuda.current_device()}" if cuda else "cpu"


def setup(
    requests: Sequence[int | None],
    *,
    names: Sequence[str] | None = None,
    tensor_parallel_size: int = 1,
    backend: str = "auto",
) -> DistContext:
    """Join the launch (torchrun's environment and store), place the agents on its nodes
    (:mod:`corl_vl.train.rank_placement`; every process computes the same plan from the same gathered node names),
    pin this process's GPU, join its agent's world, build the mpu and the baton of its GPU.
    ``requests``: each agent's ``gpus`` (None: an equal share)."""
    if dist.is_initialized():
        raise CorlError(
            "distributed: torch.distributed is already initialised; corl-vl creates each agent's own world "
            "(launch `corl-vl train` with torchrun, or let it start its processes itself)"
        )
    store, rank, world = next(dist.rendezvous("env://"))
    control = ControlPlane(dist.PrefixStore("corl_vl/cohort", store), rank, world)
    nodes = nodes_from_ranks(control.all_gather(node_id(), "node names"))
    plan = place(requests, nodes, tensor_parallel_size=tensor_parallel_size, names=names)
    plan.refuse_idle()
    groups = plan.groups
    agent = next(i for i, ranks in enumerate(groups) if rank in ranks)
    group_rank, group_size = groups[agent].index(rank), len(groups[agent])
    slots = device_slots(nodes, node_gpu_count())
    turns = None
    if slots:
        key, gpu = slots[rank]
        pin_gpu(gpu)
        members = [r for r in range(world) if slots[r][0] == key]
        turns = DeviceTurns(dist.PrefixStore("corl_vl/devices", store), key, members, rank)
    device = _join_agent_world(store, agent, group_rank, group_size, backend)
    # what vLLM's external launcher and DeepSpeed read: the agent's world, not the cohort
    os.environ.update(
        CORL_VL_COHORT_RANK=str(rank),
        CORL_VL_COHORT_SIZE=str(world),
        RANK=str(group_rank),
        WORLD_SIZE=str(group_size),
    )
    singles = [dist.new_group([r]) for r in range(group_size)]  # collective: every agent rank, same order
    mpu = AgentMPU(dist.group.WORLD, list(range(group_size)), singles[group_rank], group_rank)
    return DistContext(
        rank, world, groups, agent, dist.group.WORLD, mpu, plan, control=control, turns=turns, device=device
    )
