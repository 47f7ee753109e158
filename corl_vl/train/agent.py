"""One cohort member: its adapter, model, optimizer, schedule, rollout engine and its own view of the data.

Why a class: an agent is the unit Co-RL keeps *decoupled* — it shares no parameters, gradients or optimizer
state with its peers; the cohort (:mod:`corl_vl.train.cohort`) only hands it problem ids and advantages. The agent
never learns which model family it drives: everything family-specific goes through its adapter.

The update (one optimizer step per cohort step):
1. a no-grad pass over every completion gives the trainer's "old" logprobs (and entropies, and the frozen
   reference's logprobs when β > 0);
2. token-level importance weights ρ = exp(old − rollout), truncated at the cap, correct for rollout/trainer
   numerics (applied when a cap is set — by the config or the adapter's family default — always logged);
   non-finite rollout logprobs are contained by the adapter and counted;
3. a grad pass in micro-batches over the completions whose loss can be non-zero (non-zero advantage, or any
   when β > 0), each micro-batch normalised by whole-batch totals so the accumulated gradient equals the
   full-batch gradient; then clip, step, schedule.

Distributed runs (:mod:`corl_vl.train.distributed`) wrap the same model and AdamW in a DeepSpeed ZeRO-2/3 engine over
the agent's rank group (:meth:`attach_deepspeed`); the update is the same loop with the engine's forward,
``engine.backward`` / ``engine.step`` (DeepSpeed clips); under ZeRO-3 generation and scoring run on gathered
weights with ZeRO-3's hooks off (:meth:`inference_weights`), and the losses are normalised by the *group's* batch totals so the averaged
gradient equals the full-batch gradient whatever the share each rank trained on.
"""

from __future__ import annotations

import contextlib
import math
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from corl_vl.config import AgentConfig, CohortConfig
from corl_vl.data.problem import Problem
from corl_vl.errors import CorlError
from corl_vl.train.grpo import LossSpec, Normalizer, importance_weights, masked_mean, policy_loss
from corl_vl.rollout import Rollout, RolloutEngine, create_engine


@contextlib.contextmanager
def _zero3_inference(engine: Any) -> Iterator[None]:
    """Whole weights, no ZeRO-3 hooks, and the coordinator's per-forward ``reset_step`` paused (see
    :meth:`Agent.inference_weights`). The pause shadows the method on the coordinator instance and is undone
    by deleting the shadow, so nothing of DeepSpeed's state outlives the context."""
    from deepspeed.runtime.zero import unwrap_model_for_generation

    coordinator = engine.optimizer.parameter_offload.get_param_coordinator()
    with unwrap_model_for_generation(engine):
        coordinator.reset_step = lambda: None
        try:
            yield
        finally:
            del coordinator.reset_step


def lr_lambda(max_steps: int, warmup_ratio: float, kind: str):
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


@dataclass
class Batch:
    """One agent's step data, flattened problem-major (row = one completion)."""

    prompts: list[Any]  # PromptInputs per row
    completions: list[list[int]]
    rollout_logprobs: torch.Tensor  # [B, T]
    advantages: torch.Tensor  # [B]


class Agent:
    """A cohort member. Build with :meth:`from_config`; tests may pass a ready adapter/model/engine."""

    def __init__(
        self,
        name: str,
        adapter: Any,
        model: Any,
        view: Sequence[Problem],
        cfg: CohortConfig,
        *,
        lr: float | None = None,
        importance_ratio_cap: float | None = None,
        engine: RolloutEngine | None = None,
        ref_model: Any = None,
    ) -> None:
        self.name = name
        self.adapter = adapter
        self.model = model
        self.cfg = cfg
        self.view = {p.id: p for p in view}
        if len(self.view) != len(view):
            raise CorlError(f"agent {name}: its data view has duplicate problem ids")
        self.ref_model = ref_model
        self.ds: Any = None  # DeepSpeed engine (distributed runs), see attach_deepspeed
        self.dp_group: Any = None
        self.dp_size = 1
        tc = cfg.train
        self.lr = tc.lr if lr is None else lr
        params = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(
            params, lr=self.lr, betas=tuple(tc.adam_betas), weight_decay=tc.weight_decay, eps=1e-8
        )
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lr_lambda(tc.max_steps, tc.warmup_ratio, tc.scheduler)
        )
        self.engine = engine or create_engine(
            cfg.rollout.engine,
            adapter,
            model,
            batch_size=cfg.rollout.batch_size,
            kv_cache_memory_bytes=cfg.rollout.kv_cache_memory_bytes,
            gpu_memory_utilization=cfg.rollout.gpu_memory_utilization,
            sleep_between_phases=cfg.rollout.sleep_between_phases,
        )
        g = cfg.grpo
        cap = importance_ratio_cap if importance_ratio_cap is not None else g.importance_ratio_cap
        if cap is None:
            cap = adapter.importance_ratio_cap
        self.is_cap = None if cap == 0 else cap  # None → ratios are only logged, never applied
        self.spec = LossSpec(
            epsilon=g.epsilon,
            epsilon_high=g.epsilon_high,
            beta=g.beta,
            loss_type=g.loss_type,
            max_len=g.max_new_tokens,
        )

    @classmethod
    def from_config(
        cls,
        acfg: AgentConfig,
        cfg: CohortConfig,
        view: Sequence[Problem],
        *,
        device: str,
        adapter: Any = None,
    ) -> Agent:
        if adapter is None:
            from model_adapters.registry import create_adapter

            adapter = create_adapter(acfg.model, adapter=acfg.adapter, **acfg.adapter_kwargs)
        model = adapter.load_model(device=device)
        if cfg.train.gradient_checkpointing:
            model.gradient_checkpointing_enable()
        model.train()
        ref = None
        if cfg.grpo.beta > 0:
            ref = adapter.load_model(device=device)
            ref.requires_grad_(False)
        return cls(
            acfg.name,
            adapter,
            model,
            view,
            cfg,
            lr=acfg.lr,
            importance_ratio_cap=acfg.importance_ratio_cap,
            ref_model=ref,
        )

    # ------------------------------------------------------------------ rollout
    def problems(self, ids: Sequence[str]) -> list[Problem]:
        """This agent's view of the given ids (its own rendering: original, rephrased, text-only …)."""
        missing = [i for i in ids if i not in self.view]
        if missing:
            raise CorlError(f"agent {self.name}: problem id {missing[0]!r} is not in its data view")
        return [self.view[i] for i in ids]

    def rollout(self, ids: Sequence[str], *, seed: int) -> tuple[list[Any], list[Rollout]]:
        """Encode this agent's view of ``ids`` and sample K completions each; checks the ids came back."""
        problems = self.problems(ids)
        prompts = [self.adapter.encode_prompt(p) for p in problems]
        g = self.cfg.grpo
        self.engine.wake()
        with self.inference_weights():
            rollouts = self.engine.generate(
                problems, k=g.k, temperature=g.temperature, top_p=g.top_p, max_new_tokens=g.max_new_tokens,
                seed=seed, prompts=prompts,
            )  # fmt: skip
        got = [r.problem_id for r in rollouts]
        if got != list(ids):
            raise CorlError(
                f"agent {self.name}: rollout engine returned problems {got}, asked for {list(ids)}"
            )
        for r in rollouts:
            if len(r.completions) != g.k:
                raise CorlError(
                    f"agent {self.name}: {len(r.completions)} completions for {r.problem_id}, expected {g.k}"
                )
        return prompts, rollouts

    # ------------------------------------------------------------------ scoring / update
    def score(
        self, prompts: Sequence[Any], completions: Sequence[Sequence[int]], *, model: Any = None
    ) -> Any:
        """No-grad logprobs and entropies of completions under the trainer (or ``model``): CompletionLogprobs."""
        weights = self.inference_weights() if model is None else contextlib.nullcontext()
        with torch.no_grad(), weights:
            return self.adapter.completion_logprobs(
                model or self.model, prompts, completions, temperature=self.cfg.grpo.temperature or 1.0,
                micro_batch_size=self.cfg.grpo.micro_batch_size, with_entropy=True,
            )  # fmt: skip

    def update(self, batch: Batch, old: Any = None) -> dict[str, float]:
        """One optimizer step on ``batch``; ``old`` = :meth:`score` output if the caller already has it."""
        g = self.cfg.grpo
        device = next(self.model.parameters()).device
        old = old if old is not None else self.score(batch.prompts, batch.completions)
        mask = old.mask.to(torch.float32)
        metrics: dict[str, float] = (
            {"entropy": masked_mean(old.entropy, mask)} if old.entropy is not None else {}
        )
        ref_lp = None
        if self.spec.beta > 0:
            ref_lp = self.score(batch.prompts, batch.completions, model=self.ref_model).logprobs
        rollout_lp, replaced = self.adapter.contain_rollout_logprobs(
            batch.rollout_logprobs.to(device), old.logprobs, old.mask
        )
        weights = importance_weights(old.logprobs, rollout_lp, mask, cap=self.is_cap)
        rho = weights.rho if self.is_cap is not None else None
        metrics.update(weights.metrics)
        metrics["is/nonfinite_tokens"] = float(replaced.sum())
        norm = Normalizer.of(mask)
        adv = batch.advantages.to(device)
        rows = [i for i in range(len(batch.prompts)) if self.spec.beta > 0 or adv[i] != 0]
        mb = g.micro_batch_size
        n_micro, group_rows = -(-len(rows) // mb), len(rows)
        if self.dp_size > 1:
            norm, n_micro, group_rows = self._group_totals(norm, n_micro, len(rows))
        self.model.train()
        if self.ds is None:
            self.optimizer.zero_grad(set_to_none=True)
        loss_total, parts = 0.0, []
        for start in range(0, len(rows), mb):
            idx = rows[start : start + mb]
            cur = self.adapter.completion_logprobs(
                self.trainer, [batch.prompts[i] for i in idx], [batch.completions[i] for i in idx],
                temperature=g.temperature or 1.0, micro_batch_size=mb,
            )  # fmt: skip
            width = cur.logprobs.shape[1]
            sel = torch.tensor(idx, device=device)
            loss, m = policy_loss(
                cur.logprobs, old.logprobs[sel, :width], adv[sel], mask[sel, :width], self.spec,
                ref_logprobs=None if ref_lp is None else ref_lp[sel, :width],
                rho=None if rho is None else rho[sel, :width], normalizer=norm,
            )  # fmt: skip
            self._backward(loss)
            loss_total += float(loss.detach())
            parts.append((float(mask[sel].sum()), m))
        metrics["lr"] = self.optimizer.param_groups[0]["lr"]
        if self.ds is None:
            grad_norm = float(
                torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.train.grad_clip)
            )
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
        else:
            grad_norm = self._deepspeed_step(batch, n_micro - -(-len(rows) // mb), group_rows)
        with (
            warnings.catch_warnings()
        ):  # a skipped DeepSpeed step never calls AdamW.step; the schedule still moves
            warnings.filterwarnings("ignore", message="Detected call of `lr_scheduler.step()` before")
            self.scheduler.step()
        metrics.update({"loss": loss_total, "grad_norm": grad_norm, "trained_rows": float(len(rows))})
        total = sum(w for w, _ in parts)
        for key in ("clip/frac", "clip/low_frac", "clip/high_frac", "kl"):
            vals = [(w, m[key]) for w, m in parts if key in m]
            if vals:
                metrics[key] = sum(w * v for w, v in vals) / max(total, 1.0)
        return metrics

    # ------------------------------------------------------------------ DeepSpeed (distributed runs)
    def attach_deepspeed(self, ds_config: dict[str, Any], mpu: Any, dp_group: Any) -> None:
        """Wrap model + AdamW in a DeepSpeed engine over the agent's group (``mpu`` names the group).

        The scheduler stays ours (it sets ``lr`` on the same param-group dicts DeepSpeed's ZeRO optimizer keeps),
        so the schedule is identical to the single-process run's.
        """
        from corl_vl.train.distributed import deepspeed_engine

        self.ds = deepspeed_engine(self.model, self.optimizer, ds_config, mpu)
        self.dp_group, self.dp_size = dp_group, mpu.get_data_parallel_world_size()

    @property
    def trainer(self) -> Any:
        """What the gradient passes call: the DeepSpeed engine when there is one, else the model.

        Why not the bare model under DeepSpeed: the engine's ``forward`` is where ZeRO learns that a new micro-batch
        starts (ZeRO-3 advances its micro-step there). Bypassed, ZeRO-3 treats every ``backward`` as the first of
        the step and *overwrites* the accumulated gradient partition instead of adding to it — a step over two
        micro-batches then trains on the last one only (measured: grad norm 4.95 instead of 6.16). The engine
        passes every attribute the adapters use (``parameters()``, the call) through to the model.
        """
        return self.model if self.ds is None else self.ds

    def full_weights(self) -> Any:
        """Context with every parameter whole on this rank: ZeRO-3 partitions them across the group, and
        generation and ``save_pretrained`` need the full tensors (a gather over the agent's group only)."""
        if self.ds is None or self.ds.zero_optimization_stage() != 3:
            return contextlib.nullcontext()
        import deepspeed

        return deepspeed.zero.GatheredParameters(list(self.model.parameters()), modifier_rank=None)

    def inference_weights(self) -> Any:
        """Context for no-grad forwards (generation, scoring): whole weights and *no* ZeRO-3 module hooks.

        Why not just :meth:`full_weights`: ZeRO-3's hooks still run inside a gather — they re-partition each layer
        after use and fetch it again (an all-gather over the group) on the next forward, and re-check the trace.
        Generation and scoring run a data-dependent number of forwards per rank (its own share, its own stopping
        step), so with several ranks per agent those per-forward collectives would pair up wrongly or hang.
        DeepSpeed's ``unwrap_model_for_generation`` gathers once and removes the per-module hooks until the context
        exits. It leaves the model's start-of-forward hook, which advances the parameter coordinator's trace state
        machine (and runs its cross-rank trace check) once per forward — so the coordinator's ``reset_step`` is
        also paused here: it then sees only the gradient passes, which every group member runs equally often.
        """
        if self.ds is None or self.ds.zero_optimization_stage() != 3:
            return contextlib.nullcontext()
        return _zero3_inference(self.ds)

    def _group_totals(self, norm: Normalizer, n_micro: int, n_rows: int) -> tuple[Normalizer, int, int]:
        """Whole-group batch totals, the most micro-batches any member runs, and the group's trained rows."""
        import torch.distributed as dist

        sums = torch.tensor([norm.n_sequences, norm.n_tokens, n_rows], dtype=torch.float64)
        dist.all_reduce(sums, group=self.dp_group)
        most = torch.tensor([n_micro], dtype=torch.float64)
        dist.all_reduce(most, op=dist.ReduceOp.MAX, group=self.dp_group)
        return Normalizer(int(sums[0]), int(sums[1])), int(most[0]), int(sums[2])

    def _backward(self, loss: torch.Tensor) -> None:
        """Plain backward, or DeepSpeed's; DeepSpeed *averages* over the group, so the loss is scaled by its size
        (each member's loss is already a share of the group total)."""
        if self.ds is None:
            loss.backward()
        else:
            self.ds.backward(loss * self.dp_size if self.dp_size > 1 else loss)

    def _deepspeed_step(self, batch: Batch, padding: int, group_rows: int) -> float:
        """Finish a DeepSpeed update; returns the pre-clip gradient norm.

        ``padding`` zero-loss backward passes keep every group member's count of backward calls (ZeRO reduces in
        backward hooks) equal. A step in which no group member trained is skipped, as plain AdamW skips
        parameters without gradients.
        """
        for _ in range(padding):
            cur = self.adapter.completion_logprobs(
                self.trainer, batch.prompts[:1], batch.completions[:1], temperature=self.cfg.grpo.temperature or 1.0,
                micro_batch_size=1,
            )  # fmt: skip
            self.ds.backward(cur.logprobs.sum() * 0.0)
        if group_rows == 0:
            return 0.0
        self.ds.step()
        norm = self.ds.get_global_grad_norm()
        return float(norm) if norm is not None else float("nan")

    def sync(self) -> None:
        """Push the updated weights to the rollout engine (whole: under ZeRO-3 the module holds only partitions,
        and an engine that copies or saves them — vLLM — would get empty tensors)."""
        with self.full_weights():
            self.engine.sync_weights(self.model)

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        """Optimizer (single process) and scheduler state; DeepSpeed's partitioned state is saved by
        :meth:`save_deepspeed` instead."""
        if self.ds is not None:
            return {"scheduler": self.scheduler.state_dict()}
        return {"optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if self.ds is None:
            self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])

    def save_deepspeed(self, folder: Path) -> None:
        """Every group member writes its ZeRO partition (DeepSpeed's save has WORLD barriers: all agents save
        together)."""
        self.ds.save_checkpoint(str(folder), tag="state", save_latest=False)

    def load_deepspeed(self, folder: Path) -> None:
        path, _ = self.ds.load_checkpoint(
            str(folder), tag="state", load_optimizer_states=True, load_lr_scheduler_states=False
        )
        if path is None:
            raise CorlError(f"{folder}: no DeepSpeed state for agent {self.name}")
