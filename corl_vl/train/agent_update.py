"""One optimizer step of an agent (:meth:`corl_vl.train.agent.Agent.update` runs one per mini-batch), in named
steps: the rows that train, the backend's plan of the step, the logprob baselines of the importance ratio, the
gradient passes in micro-batches, the backend's step and the step's metrics.

Why apart from agent.py: as agent_rollout.py holds the rollout half, this holds the update's arithmetic; the
agent keeps its state (model, backend, correction, loss spec) and the engine's lifecycle.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any

import torch

from corl_vl.train import minibatches
from corl_vl.train.batch import Batch, length_mask
from corl_vl.train.grpo import Normalizer, masked_mean, policy_loss

_log = logging.getLogger("corl_vl.train.agent")

WEIGHTED_KEYS = ("clip/frac", "clip/low_frac", "clip/high_frac", "kl", "ratio/mean")


@dataclass
class Baselines:
    """The importance ratio's two sides per token: the trainer's "old" logprobs (the no-grad pass's, or filled in
    per micro-batch from the gradient pass) and the rollout's, made safe for the ratio where non-finite
    (``replaced`` marks those tokens); ``rollout``: the rollout's as they came."""

    rollout: torch.Tensor
    trainer: torch.Tensor
    contained: torch.Tensor
    replaced: torch.Tensor


def optimizer_step(agent: Any, batch: Batch, old: Any = None) -> dict[str, float]:
    """One optimizer step of ``agent`` on ``batch`` (``old``: the no-grad pass's logprobs, if it ran)."""
    device = next(agent.model.parameters()).device
    advantages = batch.advantages.to(device)
    mask = (old.mask if old is not None else length_mask(batch.completions)).to(device, torch.float32)
    metrics: dict[str, float] = {}
    if old is not None and old.entropy is not None:
        metrics["entropy"] = masked_mean(old.entropy, mask)
    rows = trained_rows(agent, batch, advantages)
    reference = None
    if agent.loss_spec.beta > 0:
        reference = agent.score(batch.prompts, batch.completions, model=agent.ref_model).logprobs
    rollout_logprobs = batch.rollout_logprobs.to(device)
    lengths = minibatches.row_lengths(batch.prompts, batch.completions)
    groups = minibatches.sharing_groups(agent.adapter, batch.prompts)  # a problem's rows kept together
    micro = minibatches.length_micro_batches(
        lengths, rows, agent.settings.grpo.micro_batch_size, groups
    )  # exact
    plan = step_plan(agent, batch, micro, mask, device)
    base = baselines(agent, old, rollout_logprobs, mask)
    agent.model.train()
    agent.backend.zero_grad()
    loss_total, parts = gradient_passes(
        agent, batch, micro, advantages, mask, base, reference, plan, old is None
    )
    metrics["lr"] = agent.backend.optimizer.param_groups[0]["lr"]
    grad_norm, nonfinite = backend_step(agent, batch, plan, loss_total)
    # importance-ratio statistics over the completions the trainer scored (all of them, or the trained rows)
    scored_rows = list(range(len(batch.prompts))) if old is not None else rows
    if scored_rows:
        scored = torch.tensor(scored_rows, device=device)
        weights = agent._is_weights(base.trainer[scored], base.contained[scored], mask[scored])
        metrics.update(weights.metrics)
    metrics["is/nonfinite_tokens"] = float(base.replaced.sum())
    metrics.update({"loss": loss_total, "grad_norm": grad_norm, "trained_rows": float(len(rows))})
    metrics["update/skipped"] = float(plan.group_rows == 0)
    metrics["update/nonfinite"] = float(nonfinite)
    # perf/padding_share: padded ÷ computed tokens of the gradient pass (right-padded micro-batches)
    padded, computed = minibatches.padding_tokens(lengths, micro)
    metrics.update({"perf/padded_tokens": float(padded), "perf/update_tokens": float(computed)})
    metrics["perf/padding_share"] = padded / computed if computed else 0.0
    total = sum(w for w, _ in parts)
    for key in WEIGHTED_KEYS:
        values = [(w, m[key]) for w, m in parts if key in m]
        if values:
            metrics[key] = sum(w * v for w, v in values) / max(total, 1.0)
    return metrics


def trained_rows(agent: Any, batch: Batch, advantages: torch.Tensor) -> list[int]:
    """The rows whose loss can be non-zero (a non-zero advantage, or any when β > 0) and that the batch trains;
    an empty completion (cut at an image placeholder) has no token to carry a gradient: never trained."""
    return [
        i
        for i in range(len(batch.prompts))
        if batch.completions[i]
        and (agent.loss_spec.beta > 0 or advantages[i] != 0)
        and (batch.trained is None or bool(batch.trained[i]))
    ]


def step_plan(agent: Any, batch: Batch, micro: list[list[int]], mask: torch.Tensor, device: Any) -> Any:
    """The backend's plan of the step over the micro-batches ``micro``: the whole-batch loss normalizer."""
    micro_batches, rows = len(micro), [i for index in micro for i in index]
    normalizer = Normalizer.of(mask)
    if batch.trained is not None:  # rows left out of the loss are left out of its totals too (as TRL)
        kept = batch.trained.to(device, torch.float32)
        normalizer = Normalizer(int(kept.sum()), int((mask * kept[:, None]).sum()))
    plan = agent.backend.plan(normalizer, micro_batches, len(rows))
    if plan.group_rows == 0:  # nothing trains anywhere in the agent's group: no forward at all
        _log.info("agent %s: every advantage is 0 this step; update skipped (no forward)", agent.name)
    return plan


def baselines(agent: Any, old: Any, rollout_logprobs: torch.Tensor, mask: torch.Tensor) -> Baselines:
    """The ratio's baselines from the no-grad pass, or placeholders the gradient passes fill in."""
    if old is not None:
        return Baselines(
            rollout_logprobs, old.logprobs, *agent._contained(rollout_logprobs, old.logprobs, mask)
        )
    replaced = torch.zeros_like(mask, dtype=torch.bool)
    return Baselines(rollout_logprobs, torch.zeros_like(mask), rollout_logprobs.clone(), replaced)


def gradient_passes(
    agent: Any,
    batch: Batch,
    micro: list[list[int]],
    advantages: torch.Tensor,
    mask: torch.Tensor,
    base: Baselines,
    reference: torch.Tensor | None,
    plan: Any,
    fill_baselines: bool,
) -> tuple[float, list[tuple[float, dict[str, float]]]]:
    """The loss's backward over the micro-batches ``micro`` (built by length, :mod:`corl_vl.train.minibatches`),
    each normalised by whole-batch totals (so the summed gradient is the full batch's); returns the summed loss
    and each micro-batch's (token weight, metrics)."""
    grpo, device = agent.settings.grpo, mask.device
    loss_total, parts = 0.0, []
    for index in micro:
        current = agent.adapter.completion_logprobs(
            agent.backend.train_module,
            [batch.prompts[i] for i in index],
            [batch.completions[i] for i in index],
            temperature=grpo.temperature or 1.0,
            micro_batch_size=len(index),  # one forward: the token budget that built it bounds its size
            **({"with_entropy": True} if agent.loss_spec.entropy_coef else {}),  # the bonus's gradient
        )
        width = current.logprobs.shape[1]
        selected = torch.tensor(index, device=device)
        if fill_baselines:
            base.trainer[selected, :width] = current.logprobs.detach()
            base.contained[selected, :width], base.replaced[selected, :width] = agent._contained(
                base.rollout[selected, :width],
                current.logprobs.detach(),
                mask[selected, :width],
            )
        old_part = base.trainer[selected, :width]
        rho = None
        if agent.importance_ratio_cap is not None:
            rho = agent._is_weights(old_part, base.contained[selected, :width], mask[selected, :width]).rho
        loss, part_metrics = policy_loss(
            current.logprobs,
            old_part,
            advantages[selected],
            mask[selected, :width],
            agent.loss_spec,
            ref_logprobs=None if reference is None else reference[selected, :width],
            rho=rho,
            entropy=current.entropy,
            normalizer=plan.normalizer,
        )
        agent.backend.backward(loss)
        loss_total += float(loss.detach())
        parts.append((float(mask[selected].sum()), part_metrics))
    return loss_total, parts


def backend_step(agent: Any, batch: Batch, plan: Any, loss_total: float) -> tuple[float, bool]:
    """The backend's step (clip, optimizer, schedule); a non-finite loss or gradient norm skips it, and the
    agent says so (counted in train/nonfinite.py). Returns the gradient norm and whether it was non-finite."""
    finite_loss = math.isfinite(loss_total)
    # passed only when needed, so a backend written before the option needs no new keyword
    extra = {} if finite_loss else {"finite_loss": False}
    grad_norm = agent.backend.step(plan, zero_loss=lambda: agent._zero_loss(batch), **extra)
    nonfinite = not (finite_loss and math.isfinite(grad_norm))
    if nonfinite:
        what = "loss" if not finite_loss else "gradient norm"
        message = "agent %s: non-finite %s (loss %s, gradient norm %s); optimizer step skipped"
        _log.warning(message, agent.name, what, loss_total, grad_norm)
    return grad_norm, nonfinite
