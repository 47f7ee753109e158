"""One cohort member: its adapter, model, optimizer, schedule, rollout engine and its own view of the data.

Why a class: an agent is the unit Co-RL keeps *decoupled* — it shares no parameters, gradients or optimizer
state with its peers; the cohort (:mod:`corl_vl.cohort`) only hands it problem ids and advantages. The agent
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
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from corl_vl.config import AgentConfig, CohortConfig
from corl_vl.data.problem import Problem
from corl_vl.errors import CorlError
from corl_vl.grpo import LossSpec, Normalizer, importance_weights, masked_mean, policy_loss
from corl_vl.rollout import Rollout, RolloutEngine, create_engine


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
        with torch.no_grad():
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
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        loss_total, parts = 0.0, []
        mb = g.micro_batch_size
        for start in range(0, len(rows), mb):
            idx = rows[start : start + mb]
            cur = self.adapter.completion_logprobs(
                self.model, [batch.prompts[i] for i in idx], [batch.completions[i] for i in idx],
                temperature=g.temperature or 1.0, micro_batch_size=mb,
            )  # fmt: skip
            width = cur.logprobs.shape[1]
            sel = torch.tensor(idx, device=device)
            loss, m = policy_loss(
                cur.logprobs, old.logprobs[sel, :width], adv[sel], mask[sel, :width], self.spec,
                ref_logprobs=None if ref_lp is None else ref_lp[sel, :width],
                rho=None if rho is None else rho[sel, :width], normalizer=norm,
            )  # fmt: skip
            loss.backward()
            loss_total += float(loss.detach())
            parts.append((float(mask[sel].sum()), m))
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.train.grad_clip)
        metrics["lr"] = self.optimizer.param_groups[0]["lr"]
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        metrics.update({"loss": loss_total, "grad_norm": float(grad_norm), "trained_rows": float(len(rows))})
        total = sum(w for w, _ in parts)
        for key in ("clip/frac", "clip/low_frac", "clip/high_frac", "kl"):
            vals = [(w, m[key]) for w, m in parts if key in m]
            if vals:
                metrics[key] = sum(w * v for w, v in vals) / max(total, 1.0)
        return metrics

    def sync(self) -> None:
        """Push the updated weights to the rollout engine."""
        self.engine.sync_weights(self.model)

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        return {"optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
