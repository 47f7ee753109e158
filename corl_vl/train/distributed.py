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

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from corl_vl.errors import CorlError
from corl_vl.train.placement import Placement, nodes_from_ranks, place


# ---------------------------------------------------------------------------------------------- shares
def share(ids: Sequence[str], group_rank: int, group_size: int) -> list[str]:
    """This group member's contiguous share of ``ids`` (sizes differ by at most one, earlier ranks larger)."""
    base, extra = divmod(len(ids), group_size)
    start = group_rank * base + min(group_rank, extra)
    return list(ids[start : start + base + (1 if group_rank < extra else 0)])


# ---------------------------------------------------------------------------------------------- the mpu
class AgentMPU:
    """What DeepSpeed asks an ``mpu`` for, answered with one agent's rank group.

    Data parallel = the agent's group (gradient reduction, ZeRO partitioning, initial-weight broadcast,
    grad-norm all-reduce, ``train_batch_size``). Model/tensor parallel = this rank alone, as a real single-rank
    group — never ``None``, which ``deepspeed.comm`` reads as WORLD.
    """

    def __init__(self, dp_group: Any, dp_ranks: list[int], single_group: Any, rank: int) -> None:
        self._dp_group, self._dp_ranks = dp_group, list(dp_ranks)
        self._single, self._rank = single_group, rank

    def get_data_parallel_group(self) -> Any:
        return self._dp_group

    def get_data_parallel_world_size(self) -> int:
        return len(self._dp_ranks)

    def get_data_parallel_rank(self) -> int:
        return self._dp_ranks.index(self._rank)

    def get_data_parallel_group_ranks(self) -> list[int]:
        return list(self._dp_ranks)

    def get_model_parallel_group(self) -> Any:
        return self._single

    def get_model_parallel_world_size(self) -> int:
        return 1

    def get_model_parallel_rank(self) -> int:
        return 0

    get_tensor_model_parallel_group = get_model_parallel_group
    get_tensor_model_parallel_world_size = get_model_parallel_world_size
    get_tensor_model_parallel_rank = get_model_parallel_rank

    def get_tensor_model_parallel_src_rank(self) -> int:
        return self._rank


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


def disable_shm_comm() -> None:
    """Keep DeepSpeed from compiling its ``deepspeed_shm_comm`` op (a long compile on a cold extension cache).

    DeepSpeed's torch backend builds that op for every CPU process group, but it only serves
    ``inference_all_reduce`` (tensor-parallel inference), which training never calls; gradients, ZeRO
    partitions and our answer exchange go through ``torch.distributed`` (gloo) either way. DeepSpeed decides
    through its per-process table of compatible ops, so marking the op incompatible there skips the build.
    Set ``CORL_VL_DS_SHM_COMM=1`` to keep DeepSpeed's default.
    """
    if os.environ.get("CORL_VL_DS_SHM_COMM") == "1":
        return
    import deepspeed.ops

    table = deepspeed.ops.__compatible_ops__  # probed once per process, then cached; edits persist
    table["deepspeed_shm_comm"] = False


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


# ---------------------------------------------------------------------------------------------- engines
def deepspeed_config(
    path: str, *, zero_stage: int | None, grad_clip: float, group_size: int, dtype: str = "float32"
) -> dict[str, Any]:
    """A DeepSpeed config from ``path`` with the trainer-owned keys filled in (``"auto"`` or absent).

    The trainer owns: gradient clipping (``train.grad_clip``), the batch bookkeeping (one optimizer step per
    cohort step, however many micro-batches the step has), ``managed_gradient_accumulation: false`` — our
    update calls ``backward`` once per micro-batch and ``step`` once, so ``step`` must be the boundary — and
    ``bf16``/``fp16`` ``"auto"``, which follow the dtype the agent's adapter loaded the model in.
    An explicit value that contradicts the trainer is an error, not silently overridden.
    """
    try:
        ds = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise CorlError(f"distributed.deepspeed: file not found: {path}") from None
    except json.JSONDecodeError as err:
        raise CorlError(
            f"distributed.deepspeed: {path} is not valid JSON ({err.msg}, line {err.lineno})"
        ) from None
    owned = {
        "gradient_clipping": grad_clip,
        "train_micro_batch_size_per_gpu": 1,
        "gradient_accumulation_steps": 1,
        "train_batch_size": group_size,
        "managed_gradient_accumulation": False,
    }
    for key, value in owned.items():
        if ds.get(key, "auto") not in ("auto", value):
            raise CorlError(f"{path}: '{key}' is set by corl-vl (to {value!r}); use \"auto\" or drop it")
        ds[key] = value
    if "optimizer" in ds or "scheduler" in ds:
        raise CorlError(
            f"{path}: drop 'optimizer'/'scheduler' — each agent's AdamW and schedule come from train.*"
        )
    for section, torch_dtype in (("bf16", "bfloat16"), ("fp16", "float16")):
        if isinstance(ds.get(section), dict) and ds[section].get("enabled") == "auto":
            ds[section]["enabled"] = dtype == torch_dtype
    zero = ds.setdefault("zero_optimization", {})
    if zero_stage is not None:
        zero["stage"] = zero_stage
    if zero.get("stage", 0) not in (2, 3):
        raise CorlError(f"{path}: zero_optimization.stage must be 2 or 3, got {zero.get('stage', 0)}")
    leftover = [k for k, v in _walk(ds) if v == "auto"]
    if leftover:
        raise CorlError(f"{path}: '{leftover[0]}' is \"auto\" but corl-vl does not fill it in")
    return ds


def _walk(obj: Any, prefix: str = "") -> list[tuple[str, Any]]:
    if isinstance(obj, dict):
        return [kv for k, v in obj.items() for kv in _walk(v, f"{prefix}{k}.")]
    return [(prefix.rstrip("."), obj)]


def deepspeed_engine(model: Any, optimizer: Any, config: dict[str, Any], mpu: AgentMPU | None) -> Any:
    """``deepspeed.initialize`` over the agent's group; refuses to run without the group's ``mpu``.

    Without ``mpu`` DeepSpeed's data-parallel group is WORLD: in a multi-agent launch that broadcasts one
    agent's weights into the others and averages their gradients together (silently, for equal architectures).
    """
    if mpu is None:  # engines exist only in multi-process runs, where the mpu is what keeps agents apart
        raise CorlError(
            "distributed: refusing to build a DeepSpeed engine without the agent's mpu — over WORLD it would "
            "mix gradients and weights of different agents"
        )
    disable_shm_comm()
    import deepspeed

    if config.get("zero_optimization", {}).get("stage") == 3:
        scope_zero3_checks(mpu)
    engine, *_ = deepspeed.initialize(model=model, optimizer=optimizer, config=config, mpu=mpu)
    return engine


# Where DeepSpeed 0.19.8 calls ``deepspeed.runtime.zero.utils.assert_ints_same_as_other_ranks`` (each module binds
# the name at import, so each binding is rebound): the parameter coordinator's trace check (always on), the
# all-gather safe mode and stage 3's gradient sanity checks (both off unless configured).
_ZERO3_CHECK_MODULES = (
    "deepspeed.runtime.zero.partitioned_param_coordinator",
    "deepspeed.runtime.zero.partition_parameters",
    "deepspeed.runtime.zero.stage3",
)
_CHECK_NAME = "assert_ints_same_as_other_ranks"


def scope_zero3_checks(mpu: AgentMPU) -> None:
    """Make ZeRO-3's "same list on every rank" checks compare the agent's group, not WORLD.

    Why: ZeRO-3 verifies after each forward/backward trace that every rank recorded the same module and
    parameter order, by broadcasting from *global rank 0 over WORLD* (``zero/utils.py``). In a cohort the other
    ranks run other agents — other architectures, other numbers of forward passes (generation) — so the check
    fails ("disagreement on list length") or waits forever for a peer that is not there. The property it guards
    (same trace on every rank that shares the parameters) is a property of the agent's group, so that is where it
    is checked; on a one-rank group it holds trivially and costs no collective. DeepSpeed has no config key to
    turn the check off, and it binds the function by name in each caller module, so those bindings are rebound —
    process-wide, which is sound because a process hosts one agent (``deepspeed.utils.groups.mpu`` is
    process-wide too). Idempotent for the same group; a second, different group in one process is an error.
    """
    import importlib

    check = _group_check(mpu)
    for module_name in _ZERO3_CHECK_MODULES:
        module = importlib.import_module(module_name)
        current = getattr(module, _CHECK_NAME, None)
        if current is None:  # a DeepSpeed that moved the check: we must not run with the WORLD version
            raise CorlError(
                f"distributed: {module_name}.{_CHECK_NAME} not found — this DeepSpeed version is not supported "
                "for ZeRO-3 cohorts (its WORLD-wide trace check would mix agents)"
            )
        bound = getattr(current, "corl_vl_group_ranks", None)
        if bound is not None and bound != mpu.get_data_parallel_group_ranks():
            raise CorlError(
                f"distributed: ZeRO-3 checks already scoped to ranks {bound}; one process hosts one agent"
            )
        setattr(module, _CHECK_NAME, check)


def _group_check(mpu: AgentMPU) -> Any:
    """``assert_ints_same_as_other_ranks`` over the agent's group: its first rank's list is the reference."""
    import torch
    import torch.distributed as dist

    group, ranks = mpu.get_data_parallel_group(), mpu.get_data_parallel_group_ranks()

    def assert_ints_same_in_group(ints: list[int]) -> None:
        if len(ranks) == 1:
            return
        device = "cuda" if dist.get_backend(group) == "nccl" else "cpu"
        length = torch.tensor([len(ints)], dtype=torch.long, device=device)
        dist.broadcast(length, src=ranks[0], group=group)
        if int(length.item()) != len(ints):
            raise RuntimeError(
                f"ZeRO-3 trace differs inside agent group {ranks}: rank {ranks[0]} has {int(length.item())} "
                f"entries, rank {dist.get_rank()} has {len(ints)}"
            )
        if not ints:
            return
        values = torch.tensor(ints, dtype=torch.long, device=device)
        dist.broadcast(values, src=ranks[0], group=group)
        if values.tolist() != list(ints):
            raise RuntimeError(
                f"ZeRO-3 trace differs inside agent group {ranks}: rank {ranks[0]} has {values.tolist()}, "
                f"rank {dist.get_rank()} has {list(ints)}"
            )

    assert_ints_same_in_group.corl_vl_group_ranks = list(ranks)  # type: ignore[attr-defined]
    return assert_ints_same_in_group
