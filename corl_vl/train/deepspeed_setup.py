"""An agent's DeepSpeed engine: the config with the trainer-owned keys filled in, the ``mpu`` that keeps the
engine on the agent's own ranks, and the ZeRO-3 trace checks scoped to them.

Why apart from :mod:`corl_vl.train.distributed`: the process layout (who runs which agent, the control plane)
does not depend on DeepSpeed; only an agent whose world has several ranks builds an engine here.
"""

from __future__ import annotations

import importlib
import os
from typing import Any

from corl_vl.errors import CorlError
from corl_vl.io import read_json_file


def collective_device(group: Any = None) -> Any:
    """The device a tensor collective on ``group`` must get: CPU when its backend serves CPU tensors (gloo),
    else this process's CUDA device (NCCL serves CUDA tensors only: a CPU tensor there raises "No backend type
    associated with device type cpu")."""
    # lazy: torch
    import torch
    import torch.distributed as dist

    name = str(dist.get_backend(group))
    served = set()
    for part in name.split(","):  # "gloo", or a per-device spec such as "cpu:gloo,cuda:nccl"
        device, _, backend = part.rpartition(":")
        served |= {device} if device else set(dist.Backend.backend_capability.get(backend, ["cpu"]))
    if "cpu" in served:
        return torch.device("cpu")
    return torch.device("cuda", torch.cuda.current_device())


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
    # lazy: deepspeed
    import deepspeed.ops

    table = deepspeed.ops.__compatible_ops__  # probed once per process, then cached; edits persist
    table["deepspeed_shm_comm"] = False


# ---------------------------------------------------------------------------------------------- engines
# What DeepSpeed 0.19.8's ``DtypeEnum`` (runtime/config.py) reads as fp32
_FP32_NAMES = ("fp32", "float32", "float", "torch.float32")


def deepspeed_config(
    path: str,
    *,
    zero_stage: int | None,
    grad_clip: float,
    group_size: int,
    dtype: str = "float32",
    offload: str = "none",
) -> dict[str, Any]:
    """A DeepSpeed config from ``path`` with the trainer-owned keys filled in (``"auto"`` or absent).

    The trainer owns: gradient clipping (``train.grad_clip``), the batch bookkeeping (one optimizer step per
    cohort step, however many micro-batches the step has), ``managed_gradient_accumulation: false`` — our
    update calls ``backward`` once per micro-batch and ``step`` once, so ``step`` must be the boundary — and
    ``bf16``/``fp16`` ``"auto"``, which follow the dtype the agent's adapter loaded the model in, and
    ``data_types.grad_accum_dtype: "fp32"``: DeepSpeed's default sums a bf16 model's micro-batch gradients in bf16
    (its gradient partitions), where the Torch backend and the logprob tail sum in fp32.
    An explicit value that contradicts the trainer is an error, not silently overridden. ``offload``
    (``optimizer.offload``): ``cpu`` is DeepSpeed's ``zero_optimization.offload_optimizer.device: cpu`` here.
    """
    ds = read_json_file(path, "distributed.deepspeed")
    if not isinstance(ds, dict):
        raise CorlError(
            f"distributed.deepspeed: {path} holds JSON {type(ds).__name__}, not an object of DeepSpeed settings"
        )
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
    data_types = ds.setdefault("data_types", {})
    if data_types.get("grad_accum_dtype", "auto") not in ("auto", *_FP32_NAMES):
        raise CorlError(
            f"{path}: 'data_types.grad_accum_dtype' is set by corl-vl (to 'fp32': gradients sum in fp32, as "
            'without DeepSpeed); use "auto" or drop it'
        )
    data_types["grad_accum_dtype"] = "fp32"
    for section, torch_dtype in (("bf16", "bfloat16"), ("fp16", "float16")):
        if isinstance(ds.get(section), dict) and ds[section].get("enabled") == "auto":
            ds[section]["enabled"] = dtype == torch_dtype
    zero = ds.setdefault("zero_optimization", {})
    if zero_stage is not None:
        zero["stage"] = zero_stage
    if zero.get("stage", 0) not in (1, 2, 3):
        raise CorlError(f"{path}: zero_optimization.stage must be 1, 2 or 3, got {zero.get('stage', 0)}")
    if offload == "cpu":  # the same meaning as the Torch backend's: masters and moments in CPU memory
        zero["offload_optimizer"] = {
            **(zero.get("offload_optimizer") or {}),
            "device": offload_device(zero, path),
        }
    # the optimizer is the agent's own torch AdamW: DeepSpeed's offload would otherwise insist on its CPU Adam op
    if (zero.get("offload_optimizer") or {}).get("device") in ("cpu", "nvme"):
        if ds.get("zero_force_ds_cpu_optimizer", "auto") not in ("auto", False):
            raise CorlError(
                f"{path}: 'zero_force_ds_cpu_optimizer' is set by corl-vl (to false: each agent's AdamW is a torch "
                'optimizer, which DeepSpeed then steps on the offloaded partitions); use "auto" or drop it'
            )
        ds["zero_force_ds_cpu_optimizer"] = False
    leftover = [k for k, v in _walk(ds) if v == "auto"]
    if leftover:
        raise CorlError(f"{path}: '{leftover[0]}' is \"auto\" but corl-vl does not fill it in")
    return ds


def offload_device(zero: dict[str, Any], path: str) -> str:
    """``cpu``, unless the JSON already offloads elsewhere (NVMe): then optimizer.offload contradicts it."""
    device = (zero.get("offload_optimizer") or {}).get("device", "none")
    if device not in ("none", "cpu"):
        raise CorlError(
            f"optimizer.offload: cpu contradicts {path}'s zero_optimization.offload_optimizer.device: {device}; "
            "drop one of them"
        )
    return "cpu"


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
    # lazy: deepspeed
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
    # lazy: torch
    import torch
    import torch.distributed as dist

    group, ranks = mpu.get_data_parallel_group(), mpu.get_data_parallel_group_ranks()

    def assert_ints_same_in_group(ints: list[int]) -> None:
        if len(ranks) == 1:
            return
        device = collective_device(group)
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
