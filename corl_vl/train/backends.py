"""Training backends: what turns an agent's micro-batch losses into one optimizer step.

Why a protocol: the GRPO update (:meth:`corl_vl.train.agent.Agent.update`) is the same whether the agent's
weights live whole in one process (:class:`TorchBackend`) or are sharded by DeepSpeed ZeRO-2/3 over the agent's
rank group (:class:`DeepSpeedBackend`). Everything that differs — who zeroes and clips gradients, how a
micro-batch's loss is scaled, how many backward passes every group member must run, whether weights must be
gathered before generation, where optimizer state is saved — sits behind the methods below, so the update
reads top to bottom with no backend branches. A new backend (FSDP, say) is one new class in this file.

Both backends keep *our* AdamW and learning-rate schedule (``train.*``), so the schedule is identical
whichever backend runs.
"""

from __future__ import annotations

import contextlib
import functools
import math
import re
import threading
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch
import torch.distributed as dist

from corl_vl.config import DistributedConfig, OptimizerConfig, TrainConfig
from corl_vl.errors import CorlError
from corl_vl.train.deepspeed_setup import collective_device, deepspeed_config, deepspeed_engine
from corl_vl.train.grpo import Normalizer
from corl_vl.train.optimizer import MasterAdamW, clip_gradients, resolve_fused


def lr_lambda(max_steps: int, warmup_ratio: float, kind: str) -> Callable[[int], float]:
    """Linear warm-up over ``ceil(warmup_ratio · max_steps)`` steps, then cosine to 0 (or constant)."""
    warmup = math.ceil(warmup_ratio * max_steps)

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        if kind == "constant":
            return 1.0
        progress = (step - warmup) / max(1, max_steps - warmup)
        return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))

    return factor


@dataclass(frozen=True)
class StepPlan:
    """The batch totals one update normalises by, and the backward passes it owes its group.

    ``normalizer``: whole-batch totals (across the agent's group in a distributed run) each micro-batch loss is
    divided by, so the accumulated gradient is the full-batch gradient; ``padding_passes``: zero-loss backward
    passes this rank adds so every group member runs as many as the busiest; ``group_rows``: completions the
    whole group trains on this step (0 → the step is skipped).
    """

    normalizer: Normalizer
    padding_passes: int
    group_rows: int


def launch_backend(
    backend: TorchBackend, settings: DistributedConfig, dist: Any, train: TrainConfig, optim: OptimizerConfig
) -> TrainingBackend:
    """The backend an agent trains with in this launch: ``backend`` itself in one process; in a multi-process
    launch (``dist``) the distributed backend ``settings`` (the ``distributed`` section) names — a new backend
    adds its case here (``train.grad_clip`` and ``optimizer.offload`` carry over)."""
    if dist is None:
        return backend
    # an agent alone in its world: nothing to shard (more ranks without a file: train/launch_support.py refuses)
    if not settings.deepspeed:
        return backend
    dtype = str(next(backend.model.parameters()).dtype).removeprefix("torch.")
    ds_config = deepspeed_config(
        settings.deepspeed,
        zero_stage=settings.zero_stage,
        grad_clip=train.grad_clip,
        group_size=dist.group_size,
        dtype=dtype,
        offload=optim.offload,  # DeepSpeed's offload_optimizer: the same CPU-memory placement
    )
    # DeepSpeed's own overflow check is what keeps a non-finite gradient out of the weights (see step)
    bf16, zero = ds_config.get("bf16") or {}, ds_config.get("zero_optimization") or {}
    overflow_check_off = bf16.get("enabled") and bf16.get("check_grad_overflow") is False
    if overflow_check_off or zero.get("compute_grad_norm") is False:
        raise CorlError(
            f"{settings.deepspeed}: bf16.check_grad_overflow and zero_optimization.compute_grad_norm must stay "
            "true: without them a non-finite gradient would update the weights"
        )
    return DeepSpeedBackend(backend, ds_config, dist.mpu, dist.dp_group)


class TrainingBackend(Protocol):
    """What :meth:`Agent.update` and the checkpoint code need from a backend."""

    model: Any
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    # gathers given parameters whole (ZeRO-3); None: every parameter is whole on this rank already
    weight_gather: Callable[[list[Any]], contextlib.AbstractContextManager[Any]] | None

    @property
    def train_module(self) -> Any:
        """What gradient passes call (the model, or an engine that wraps it)."""

    def plan(self, normalizer: Normalizer, micro_batches: int, rows: int) -> StepPlan: ...
    def zero_grad(self) -> None: ...
    def backward(self, loss: torch.Tensor) -> None: ...
    def step(
        self, plan: StepPlan, zero_loss: Callable[[], torch.Tensor], *, finite_loss: bool = True
    ) -> float: ...
    def inference_weights(self) -> contextlib.AbstractContextManager[Any]: ...
    def full_weights(self) -> contextlib.AbstractContextManager[Any]: ...
    def state_dict(self) -> dict[str, Any]: ...
    def load_state_dict(self, state: dict[str, Any]) -> None: ...
    def save(self, folder: Path) -> None: ...
    def load(self, folder: Path) -> None: ...

    @property
    def loads_weights(self) -> bool:
        """Whether :meth:`load` restores the weights too (else the checkpoint's model folder does)."""


_WARNINGS_LOCK = threading.Lock()  # catch_warnings swaps process-wide filters: agents step in threads


def _advance_schedule(scheduler: torch.optim.lr_scheduler.LRScheduler) -> None:
    # A skipped DeepSpeed step never calls AdamW.step; the schedule still moves (torch warns about the order).
    with _WARNINGS_LOCK, warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=re.escape("Detected call of `lr_scheduler.step()` before"))
        scheduler.step()


class TorchBackend:
    """One process holds the whole model: plain ``backward``, clip, AdamW ``step``.

    Low-precision (bf16/fp16) parameters get fp32 master weights: AdamW steps the fp32 masters and the model
    receives them rounded. Stepping bf16 weights directly loses every update smaller than half a bf16 ulp —
    at RL learning rates (~1e-6) that is nearly all of them, and the run silently trains nothing. The
    optimizer (:class:`~corl_vl.train.optimizer.MasterAdamW`) stores bf16 masters as low halves, sums
    micro-batch gradients in fp32 and honours ``optimizer.fused`` / ``optimizer.offload``.
    ``master_weights=None`` decides by the parameters' dtype (``True``: fp32 copies even of fp32 weights);
    ``False`` steps the parameters themselves with torch's AdamW (DeepSpeed keeps its own masters).
    """

    loads_weights = False  # a checkpoint's model folder holds its weights

    def __init__(
        self,
        model: Any,
        train: TrainConfig,
        *,
        lr: float,
        master_weights: bool | None = None,
        optimizer: OptimizerConfig | None = None,
    ) -> None:
        self.model = model
        self.train_cfg, self.lr = train, lr
        self.grad_clip = train.grad_clip
        settings = self.optimizer_cfg = optimizer or OptimizerConfig()
        params = [p for p in model.parameters() if p.requires_grad]
        adam = {"lr": lr, "betas": tuple(train.adam_betas), "weight_decay": train.weight_decay, "eps": 1e-8}
        self.optimizer: torch.optim.Optimizer
        if master_weights is False:  # the parameters stepped as they are (DeepSpeed wraps this optimizer)
            device = params[0].device if params else torch.device("cpu")
            fused = resolve_fused(True, device) if settings.fused else settings.fused  # None: torch's choice
            self.optimizer = torch.optim.AdamW(params, **adam, fused=fused)
            self.masters: list[tuple[torch.nn.Parameter, torch.Tensor]] = []
        else:
            self.optimizer = MasterAdamW(
                params,
                **adam,
                fused=settings.fused,
                offload=settings.offload == "cpu",
                force_masters=bool(master_weights),
            )
            # (model parameter, its stored master) pairs; empty when the parameters are their own masters
            self.masters = [
                (w, m) for w, m, k in zip(params, self.optimizer.masters, self.optimizer.kinds) if k != "self"
            ]
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lr_lambda(train.max_steps, train.warmup_ratio, train.scheduler)
        )

    @property
    def train_module(self) -> Any:
        return self.model

    def plan(self, normalizer: Normalizer, micro_batches: int, rows: int) -> StepPlan:
        return StepPlan(normalizer, padding_passes=0, group_rows=rows)

    def zero_grad(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)

    def backward(self, loss: torch.Tensor) -> None:
        loss.backward()

    def step(
        self, plan: StepPlan, zero_loss: Callable[[], torch.Tensor], *, finite_loss: bool = True
    ) -> float:
        """Clip, step, zero; returns the pre-clip gradient norm (of the fp32 gradients with master weights).

        ``grad_clip: 0`` means no clipping (as in DeepSpeed; torch would scale every gradient to 0). A
        non-finite loss or gradient norm skips the optimizer step: the weights and AdamW's moments stay as they
        were, the gradients are dropped, and the schedule still advances (so it stays aligned with the steps)."""
        if isinstance(self.optimizer, MasterAdamW):
            grads = self.optimizer.collect_grads()  # fp32, summed over the micro-batches
        else:
            grads = [p.grad for p in self.model.parameters() if p.grad is not None]
        grad_norm = float(clip_gradients(grads, self.grad_clip))
        if finite_loss and math.isfinite(grad_norm):
            self.optimizer.step()  # the model's weights receive the rounded masters
        self.optimizer.zero_grad(set_to_none=True)
        _advance_schedule(self.scheduler)
        return grad_norm

    def inference_weights(self) -> contextlib.AbstractContextManager[Any]:
        return contextlib.nullcontext()

    def full_weights(self) -> contextlib.AbstractContextManager[Any]:
        return contextlib.nullcontext()

    weight_gather = None  # the weights are whole in this process

    def state_dict(self) -> dict[str, Any]:
        state = {"optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict()}
        if self.masters:  # the saved model holds the rounded weights; the fp32 masters carry the rest
            state["master_weights"] = [master for _, master in self.masters]
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        saved = state.get("master_weights")
        if isinstance(self.optimizer, MasterAdamW):
            # a checkpoint without masters (saved in fp32, or without masters) restarts them from the model
            stored = [i for i, kind in enumerate(self.optimizer.kinds) if kind != "self"]
            for n, index in enumerate(stored):
                self.optimizer.load_master(index, saved[n] if saved is not None else None)

    def save(self, folder: Path) -> None:
        """Nothing beyond :meth:`state_dict`: the weights are the model's own ``save_pretrained``."""

    def load(self, folder: Path) -> None:
        """Nothing beyond :meth:`load_state_dict` (see :meth:`save`)."""


@contextlib.contextmanager
def _zero3_inference(engine: Any) -> Iterator[None]:
    """Whole weights, no ZeRO-3 hooks, and the coordinator's per-forward ``reset_step`` paused (see
    :meth:`DeepSpeedBackend.inference_weights`). The pause shadows the method on the coordinator instance and is
    undone by deleting the shadow, so nothing of DeepSpeed's state outlives the context."""
    # lazy: deepspeed (distributed runs only)
    from deepspeed.runtime.zero import unwrap_model_for_generation

    coordinator = engine.optimizer.parameter_offload.get_param_coordinator()
    with unwrap_model_for_generation(engine):
        coordinator.reset_step = lambda: None
        try:
            yield
        finally:
            del coordinator.reset_step


class DeepSpeedBackend:
    """The same model and AdamW wrapped in a DeepSpeed ZeRO-1/2/3 engine over the agent's rank group.

    The scheduler stays ours: it sets ``lr`` on the same param-group dicts DeepSpeed's ZeRO optimizer keeps, so
    the schedule is identical to the single-process run's. DeepSpeed clips (``gradient_clipping``).
    """

    loads_weights = True  # its checkpoint holds the ZeRO partitions of the weights

    def __init__(self, base: TorchBackend, ds_config: dict[str, Any], mpu: Any, dp_group: Any) -> None:
        if isinstance(base.optimizer, MasterAdamW):
            # DeepSpeed keeps its own fp32 masters (bf16 config) and reads .grad: AdamW over the parameters
            base.optimizer.remove_hooks()
            base = TorchBackend(
                base.model, base.train_cfg, lr=base.lr, master_weights=False, optimizer=base.optimizer_cfg
            )
        self.model, self.optimizer, self.scheduler = base.model, base.optimizer, base.scheduler
        self.engine = deepspeed_engine(base.model, base.optimizer, ds_config, mpu)
        self.dp_group, self.dp_size = dp_group, mpu.get_data_parallel_world_size()

    @property
    def train_module(self) -> Any:
        """The engine, not the bare model: its ``forward`` is where ZeRO learns that a new micro-batch starts.

        Bypassed, ZeRO-3 treats every ``backward`` as the first of the step and *overwrites* the accumulated
        gradient partition instead of adding to it, so a step over two micro-batches would train on the last one
        only. The engine passes every attribute the adapters use through to the model.
        """
        return self.engine

    @property
    def zero3(self) -> bool:
        return self.engine.zero_optimization_stage() == 3

    def plan(self, normalizer: Normalizer, micro_batches: int, rows: int) -> StepPlan:
        """Whole-group batch totals, and the padding passes up to the most micro-batches any member runs."""
        if self.dp_size == 1:
            return StepPlan(normalizer, padding_passes=0, group_rows=rows)

        device = collective_device(self.dp_group)  # NCCL takes CUDA tensors only
        sums = torch.tensor(
            [normalizer.n_sequences, normalizer.n_tokens, rows], dtype=torch.float64, device=device
        )
        dist.all_reduce(sums, group=self.dp_group)
        most = torch.tensor([micro_batches], dtype=torch.float64, device=device)
        dist.all_reduce(most, op=dist.ReduceOp.MAX, group=self.dp_group)
        group_normalizer = Normalizer(int(sums[0]), int(sums[1]))
        return StepPlan(
            group_normalizer, padding_passes=int(most[0]) - micro_batches, group_rows=int(sums[2])
        )

    def zero_grad(self) -> None:
        """DeepSpeed zeroes gradients itself after each ``step``."""

    def backward(self, loss: torch.Tensor) -> None:
        """DeepSpeed *averages* over the group, so the loss (already a share of the group total) is scaled up."""
        self.engine.backward(loss * self.dp_size if self.dp_size > 1 else loss)

    def step(
        self, plan: StepPlan, zero_loss: Callable[[], torch.Tensor], *, finite_loss: bool = True
    ) -> float:
        """Padding passes (ZeRO reduces in backward hooks, so every member must run as many), then the step.

        A step in which no group member trained is skipped, as plain AdamW skips parameters without gradients.
        Returns the pre-clip gradient norm. A non-finite gradient norm is skipped by DeepSpeed itself (its
        overflow check, on by default for every precision ZeRO-2/3 runs; it reports the norm as inf); a
        non-finite loss gives non-finite gradients, so it is skipped the same way.
        """
        for _ in range(plan.padding_passes):
            self.engine.backward(zero_loss())
        if plan.group_rows == 0:
            _advance_schedule(self.scheduler)
            return 0.0
        self.engine.step()
        _advance_schedule(self.scheduler)
        norm = self.engine.get_global_grad_norm()
        return float(norm) if norm is not None else float("nan")

    def full_weights(self) -> contextlib.AbstractContextManager[Any]:
        """Every parameter whole on this rank: ZeRO-3 partitions them across the group, and generation and
        ``save_pretrained`` need the full tensors (a gather over the agent's group only)."""
        gather = self.weight_gather
        return contextlib.nullcontext() if gather is None else gather(list(self.model.parameters()))

    @property
    def weight_gather(self) -> Callable[[list[Any]], contextlib.AbstractContextManager[Any]] | None:
        """ZeRO-3: a context making the given parameters whole (a collective: every group member gathers the same
        ones in the same order); None when they are whole already. A streamed weight sync gathers one at a time."""
        if not self.zero3:
            return None
        import deepspeed  # lazy: deepspeed (distributed runs only)

        return functools.partial(deepspeed.zero.GatheredParameters, modifier_rank=None)

    def inference_weights(self) -> contextlib.AbstractContextManager[Any]:
        """Whole weights and *no* ZeRO-3 module hooks, for no-grad forwards (generation, scoring).

        Why not :meth:`full_weights`: ZeRO-3's hooks still run inside a gather — they re-partition each layer
        after use and gather it again (a collective over the group) on the next forward. Generation and scoring
        run a data-dependent number of forwards per rank, so those per-forward collectives would pair up wrongly
        or hang. DeepSpeed's ``unwrap_model_for_generation`` gathers once and removes the per-module hooks; the
        parameter coordinator's ``reset_step`` (run once per forward by the model's remaining hook, with a
        cross-rank trace check) is paused too, so it sees only the gradient passes every member runs equally.
        """
        if not self.zero3:
            return contextlib.nullcontext()
        return _zero3_inference(self.engine)

    def state_dict(self) -> dict[str, Any]:
        """The scheduler only: the partitioned optimizer state is written by :meth:`save`."""
        return {"scheduler": self.scheduler.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.scheduler.load_state_dict(state["scheduler"])

    def save(self, folder: Path) -> None:
        """Every group member writes its ZeRO partition (DeepSpeed's save has WORLD barriers: all agents save
        together)."""
        self.engine.save_checkpoint(str(folder), tag="state", save_latest=False)

    def load(self, folder: Path) -> None:
        path, _ = self.engine.load_checkpoint(
            str(folder), tag="state", load_optimizer_states=True, load_lr_scheduler_states=False
        )
        if path is None:
            raise CorlError(f"{folder}: no DeepSpeed state in this checkpoint")
