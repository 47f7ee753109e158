"""One cohort member: its adapter, model, training backend, rollout engine and its own view of the data.

Why a class: an agent is the unit Co-RL keeps *decoupled* — it shares no parameters, gradients or optimizer
state with its peers; the cohort (:mod:`corl_vl.train.cohort`) only hands it problem ids and advantages. The agent
never learns which model family it drives: everything family-specific goes through its adapter.

The update (``grpo.updates_per_batch`` optimizer steps per cohort step, :mod:`corl_vl.train.minibatches`):
1. the "old" logprobs come from a no-grad pass over every completion when something reads it (a token-level
   reward, ``train.log_entropy``, or several updates per batch); with one update they are otherwise the
   gradient pass's own, detached, as in TRL (same loss and gradient, one forward less). The reference's come
   from a no-grad pass when β > 0. An agent whose advantages are all 0 (β = 0) runs no forward at all;
2. token-level importance weights ρ = exp(old − rollout), truncated at the cap, correct for rollout/trainer
   numerics (applied when a cap is set — by the config or the adapter's family default — always logged);
   non-finite rollout logprobs are contained by the adapter and counted;
3. a grad pass in micro-batches over the completions whose loss can be non-zero (non-zero advantage, or any
   when β > 0), built by length (little padding, :mod:`corl_vl.train.minibatches`), each normalised by
   whole-batch totals so the accumulated gradient equals the full-batch gradient; then the backend's step.

Where the weights live and how a step is taken is the backend's business (:mod:`corl_vl.train.backends`): one
process with plain torch, or a DeepSpeed ZeRO-2/3 engine over the agent's rank group in distributed runs.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

from corl_vl.config import AgentConfig, CohortConfig, GrpoConfig, OptimizerConfig, RolloutConfig, TrainConfig
from corl_vl.data.problem import Problem
from corl_vl.errors import CorlError
from corl_vl.losses.rollout_correction import resolve_correction
from corl_vl.rollout import Rollout, RolloutEngine
from corl_vl.rollout.base import engine_errors
from corl_vl.train import minibatches
from corl_vl.train.agent_rollout import build_engine, run_rollout
from corl_vl.train.agent_update import optimizer_step
from corl_vl.train.backends import TorchBackend, TrainingBackend
from corl_vl.train.batch import Batch, concat_rows, fit_width
from corl_vl.train.grpo import LossSpec, importance_weights
from corl_vl.train.lora import prepare_training
from corl_vl.train.minibatches import batch_rows, merge_updates, mini_batches, old_rows
from corl_vl.train.training_defaults import apply_training_defaults
from model_adapters.registry import create_adapter


@dataclasses.dataclass(frozen=True)
class AgentSettings:
    """The config sections an agent reads (its update, its engine, its optimizer, its schedule), not the whole
    cohort config: the cohort builds one with :meth:`of`."""

    grpo: GrpoConfig
    rollout: RolloutConfig
    optimizer: OptimizerConfig
    train: TrainConfig

    @classmethod
    def of(cls, cfg: CohortConfig) -> AgentSettings:
        return cls(cfg.grpo, cfg.rollout, cfg.optimizer, cfg.train)


class Agent:
    """A cohort member. Build with :meth:`from_config`; tests may pass a ready adapter/model/engine."""

    def __init__(
        self,
        name: str,
        adapter: Any,
        model: Any,
        view: Sequence[Problem],
        settings: AgentSettings,
        *,
        lr: float | None = None,
        importance_ratio_cap: float | None = None,
        engine: RolloutEngine | None = None,
        ref_model: Any = None,
    ) -> None:
        self.name = name
        self.adapter = adapter
        self.model = model
        self.settings = settings
        self.view = {p.id: p for p in view}
        if len(self.view) != len(view):
            raise CorlError(f"agent {name}: its data view has duplicate problem ids")
        self.ref_model = ref_model
        self.lr = settings.train.lr if lr is None else lr
        # distributed runs swap in a DeepSpeedBackend over the same model and optimizer (Cohort.from_config)
        # the schedule counts optimizer steps: grpo.updates_per_batch of them per cohort step
        train, grpo = settings.train, settings.grpo
        schedule = dataclasses.replace(train, max_steps=train.max_steps * grpo.updates_per_batch)
        self.backend: TrainingBackend = TorchBackend(
            model, schedule, lr=self.lr, optimizer=settings.optimizer
        )
        self.engine = engine or build_engine(
            name, adapter, model, view, settings.rollout, grpo.max_new_tokens
        )
        self._engine_asleep = False  # engines start awake, holding the weights the trainer starts from
        self._engine_stale = False
        self.position: Callable[[], str] | None = None  # where the run is, for error lines (NonFiniteStop)
        self.sync_seconds = 0.0  # time spent in weight syncs since the last take_sync_seconds()
        # (mode, threshold): the family's default unless grpo.rollout_correction / a cap says otherwise
        self.correction, self.importance_ratio_cap = resolve_correction(
            grpo.rollout_correction,
            importance_ratio_cap,
            grpo.importance_ratio_cap,
            adapter.importance_ratio_cap,
        )  # cap None → ratios are only logged, never applied
        self.loss_spec = LossSpec.of(grpo)

    @classmethod
    def from_config(
        cls,
        agent_cfg: AgentConfig,
        settings: AgentSettings,
        view: Sequence[Problem],
        *,
        device: str,
        adapter: Any = None,
    ) -> Agent:
        if adapter is None:
            adapter = create_adapter(
                agent_cfg.model, adapter=agent_cfg.adapter, **agent_cfg.adapter_options()
            )
        model = adapter.load_model(device=device)
        apply_training_defaults(model, settings.train, device)  # checkpointing on GPU, dropout zeroed
        model.train()
        ref = prepare_training(  # LoRA, train.freeze, KL reference
            model, adapter, agent_cfg, freeze=settings.train.freeze, beta=settings.grpo.beta, device=device
        )
        return cls(
            agent_cfg.name,
            adapter,
            model,
            view,
            settings,
            lr=agent_cfg.lr,
            importance_ratio_cap=agent_cfg.importance_ratio_cap,
            ref_model=ref,
        )

    # ------------------------------------------------------------------ rollout
    def problems(self, ids: Sequence[str]) -> list[Problem]:
        """This agent's view of the given ids (its own rendering: original, rephrased, text-only …)."""
        missing = [i for i in ids if i not in self.view]
        if missing:
            raise CorlError(f"agent {self.name}: problem id {missing[0]!r} is not in its data view")
        return [self.view[i] for i in ids]

    def encode(self, ids: Sequence[str]) -> list[Any]:
        """This agent's prompts (PromptInputs) for ``ids``, rendered by its adapter."""
        return [self.adapter.encode_prompt(p) for p in self.problems(ids)]

    def rollout(
        self, ids: Sequence[str], *, seed: int, prompts: Sequence[Any] | None = None
    ) -> tuple[list[Any], list[Rollout]]:
        """Encode this agent's view of ``ids`` (unless ``prompts`` from :meth:`encode` are given) and sample K
        completions each; checks the ids came back.

        Render once: the prompts returned here are the ones the engine generated from and the ones the update
        scores — no engine renders a problem again (a second rendering could differ, e.g. across midnight).
        """
        return run_rollout(self, ids, seed=seed, prompts=prompts)

    # ------------------------------------------------------------------ scoring / update
    def score(
        self, prompts: Sequence[Any], completions: Sequence[Sequence[int]], *, model: Any = None
    ) -> Any:
        """No-grad logprobs and entropies of completions under the trainer (or ``model``): CompletionLogprobs."""
        weights = self.backend.inference_weights() if model is None else contextlib.nullcontext()
        # the update's micro-batches (corl_vl.train.minibatches): one forward each, little padding, a problem's
        # rows together (one vision pass per problem per forward); handed back in the caller's order
        groups = minibatches.sharing_groups(self.adapter, prompts)
        lengths = minibatches.row_lengths(prompts, completions)
        micro = minibatches.length_micro_batches(
            lengths, list(range(len(prompts))), self.settings.grpo.micro_batch_size, groups
        )
        with torch.no_grad(), weights:
            parts = [
                self.adapter.completion_logprobs(
                    model or self.model,
                    [prompts[i] for i in rows],
                    [completions[i] for i in rows],
                    temperature=self.settings.grpo.temperature or 1.0,
                    micro_batch_size=max(1, len(rows)),  # one forward: its token budget bounds its size
                    with_entropy=True,
                )
                for rows in micro or [[]]  # no rows: one empty call, the adapter's own empty record
            ]
        if not micro:
            return parts[0]
        order = [i for rows in micro for i in rows]
        return old_rows(concat_rows(parts), sorted(range(len(order)), key=order.__getitem__))

    def update(self, batch: Batch, old: Any = None, *, group_size: int | None = None) -> dict[str, float]:
        """``grpo.updates_per_batch`` optimizer steps on ``batch``, one per mini-batch of whole groups of
        ``group_size`` rows (default ``grpo.k``).

        ``old``: :meth:`score` output when the caller ran the no-grad pass. With one update and no ``old`` the
        "old" logprobs are the gradient pass's own, detached (TRL with one update: same loss and gradient, one
        forward less). Several updates need the weights before the first step, so the pass runs here if the
        caller did not; from the second update on the ratio leaves 1 and the clipping applies.
        """
        n = self.settings.grpo.updates_per_batch
        old = fit_width(old, batch.rollout_logprobs.shape[1])  # rows selected after the pass (module doc)
        if n == 1:
            metrics = self._optimizer_step(batch, old)
            metrics.pop("ratio/mean", None)  # 1 up to rounding with one update: no signal
            self.last_updates = [metrics]
            return metrics
        if old is None:
            old = self.score(batch.prompts, batch.completions)
        self.last_updates = [
            self._optimizer_step(batch_rows(batch, index), old_rows(old, index))
            for index in mini_batches(len(batch.prompts), group_size or self.settings.grpo.k, n)
        ]
        return merge_updates(self.last_updates)

    def _optimizer_step(self, batch: Batch, old: Any = None) -> dict[str, float]:
        """One optimizer step on ``batch`` (see :meth:`update`; its steps: :mod:`corl_vl.train.agent_update`)."""
        return optimizer_step(self, batch, old)

    last_updates: list[dict[str, float]] = []  # the last update()'s metrics per optimizer step (tests)

    def _is_weights(self, trainer: torch.Tensor, rollout: torch.Tensor, mask: torch.Tensor) -> Any:
        """Importance weights at this agent's correction (``grpo.rollout_correction``) and threshold."""
        return importance_weights(trainer, rollout, mask, cap=self.importance_ratio_cap, mode=self.correction)

    def _contained(
        self, rollout_logprobs: torch.Tensor, trainer_logprobs: torch.Tensor, mask: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Rollout logprobs safe for the ratio, and where a non-finite one was replaced (see the adapter)."""
        if self.importance_ratio_cap is None:  # ratios only logged: a non-finite one is counted, never fatal
            return rollout_logprobs, ~torch.isfinite(rollout_logprobs) & mask.bool()
        return self.adapter.contain_rollout_logprobs(rollout_logprobs, trainer_logprobs, mask)

    def _zero_loss(self, batch: Batch) -> torch.Tensor:
        """A loss of exactly 0 through a real forward (a backward pass that contributes no gradient)."""
        # a row with tokens, so there is something to differentiate
        row = next((i for i, ids in enumerate(batch.completions) if ids), 0)
        current = self.adapter.completion_logprobs(
            self.backend.train_module,
            batch.prompts[row : row + 1],
            batch.completions[row : row + 1],
            temperature=self.settings.grpo.temperature or 1.0,
            micro_batch_size=1,
        )
        return current.logprobs.sum() * 0.0

    def full_weights(self) -> Any:
        """Context with every parameter whole on this rank (see the backend's ``full_weights``)."""
        return self.backend.full_weights()

    # ------------------------------------------------------------------ rollout engine: sleep / wake / sync
    # The only code that calls the engine's sleep, wake and sync_weights, so their order is fixed here: weights
    # are synced only into awake weights, with the KV cache asleep. vLLM's sleep frees the weights' GPU memory
    # (a reload then writes freed memory); waking the KV cache after the sync keeps it off the sync's peak.
    def prepare_engine(self) -> RolloutEngine:
        """Wake the engine and bring it up to the trainer's weights; returns it, ready to generate.

        With a sync due: weights awake, sync, then the KV cache (an awake engine sleeps first, so the sync
        never meets its KV cache); otherwise one full wake.
        """
        if not (self._engine_stale or getattr(self.engine, "needs_weights", False)):  # level 2 drops them
            with engine_errors(self.name):
                self.engine.wake()
            self._engine_asleep = False
            return self.engine
        t0 = time.perf_counter()
        with engine_errors(self.name):
            if not self._engine_asleep:
                self.engine.sleep()
            self.engine.wake(tags=["weights"])
            # under ZeRO-3 the module holds only partitions, which an engine that copies them (vLLM) would take
            # for empty tensors: a streaming engine gathers one parameter at a time, any other gets them whole
            gather = getattr(self.backend, "weight_gather", None)
            if gather is not None and getattr(self.engine, "streams_weights", False):
                self.engine.sync_weights(self.model, gather=gather)
            else:
                with self.backend.full_weights():
                    self.engine.sync_weights(self.model)
            self.engine.wake(tags=["kv_cache"])
        self._engine_asleep = self._engine_stale = False
        self.sync_seconds += time.perf_counter() - t0
        return self.engine

    def release_engine(self) -> None:
        """Let the engine free accelerator memory while the trainer scores and updates; also right after the
        engine is built, when the next agent's engine needs the device (after a level-2 sleep the engine
        ``needs_weights``: the next :meth:`prepare_engine` syncs them)."""
        self.engine.sleep()
        self._engine_asleep = True

    def sync(self) -> None:
        """The trainer's weights changed: sync now if the engine is awake, else on the next wake."""
        self._engine_stale = True
        if not self._engine_asleep:
            self.prepare_engine()

    def take_sync_seconds(self) -> float:
        """Seconds spent syncing weights since the last call (a deferred sync runs inside the next rollout)."""
        seconds, self.sync_seconds = self.sync_seconds, 0.0
        return seconds

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        """Optimizer and scheduler state, as far as the backend does not write it itself (its ``save``)."""
        return self.backend.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.backend.load_state_dict(state)
