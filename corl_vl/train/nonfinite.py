"""Non-finite training stops in one line: K skipped steps in a row, or NaN/inf scores while sampling.

Why: a single non-finite loss or gradient norm is skipped by the backend (no optimizer step, the metric
``update/nonfinite``, a log line naming the agent), so the weights stay finite. But an agent that keeps
producing them trains nothing; after :data:`NONFINITE_STEPS` such steps in a row the run stops, naming the agent,
the steps and the last checkpoint — whose weights are finite, because no skipped step changed them. A model
whose next-token scores are NaN/inf fails its rollout the same way (:func:`rollout_error`), not through a
sampling traceback.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from corl_vl.errors import CorlError
from corl_vl.rollout.hf import NonFiniteLogits
from corl_vl.train.checkpoint import latest_checkpoint
from corl_vl.train.loop import Callback, TrainingRun

NONFINITE_STEPS = 3  # consecutive skipped steps of one agent that stop the run


def last_checkpoint_line(run_dir: Path | None) -> str:
    found = latest_checkpoint(run_dir) if run_dir is not None else None
    return f"last checkpoint: {found}" if found is not None else "no checkpoint saved yet"


def nonfinite_parameters(model: Any) -> int:
    """How many parameter values of ``model`` are NaN or inf."""
    with torch.no_grad():
        return sum(int((~torch.isfinite(p)).sum()) for p in model.parameters())


def rollout_error(agent: Any, err: NonFiniteLogits) -> CorlError:
    """``err`` as one line naming the agent, where the run is (``agent.position``) and what its weights hold."""
    bad = nonfinite_parameters(agent.model)
    weights = (
        f"{bad} of its weights are NaN/inf"
        if bad
        else "its weights are finite but too large (an update exploded: lower train.lr)"
    )
    where = agent.position() if callable(getattr(agent, "position", None)) else ""
    return CorlError(f"agent {agent.name}: {err}; {weights}" + (f" ({where})" if where else ""))


class NonFiniteStop(Callback):
    """Counts each agent's consecutive ``update/nonfinite`` steps; at ``limit`` raises a one-line CorlError.

    Placed after the metrics sinks, so the last step is recorded. In a distributed run the check is a
    collective (every rank stops when any agent's rank does), as with stall detection.
    """

    def __init__(self, run_dir: str | Path | None, limit: int = NONFINITE_STEPS, dist: Any = None) -> None:
        self.run_dir = Path(run_dir) if run_dir is not None else None
        self.limit, self.dist = limit, dist
        self.streaks: dict[str, int] = {}

    def on_fit_start(self, run: TrainingRun) -> None:
        for agent in run.cohort.agents:  # so a rollout error can say where the run is
            agent.position = lambda: f"step {run.completed}; {last_checkpoint_line(self.run_dir)}"

    def on_step_end(self, run: TrainingRun) -> None:
        for name, values in run.metrics.items():
            skipped = values.get("update/nonfinite", 0.0) > 0
            self.streaks[name] = self.streaks.get(name, 0) + 1 if skipped else 0
        reason = self.reason(run.step_index)
        # a vote on the control plane: CPU data, never a tensor into NCCL (every process votes)
        voted = self.dist is not None and self.dist.any_flag(reason is not None, "the non-finite vote")
        if voted and reason is None:
            reason = "non-finite training on another agent's ranks (its message names the agent)"
        if reason is not None:
            raise CorlError(reason)

    def reason(self, step: int) -> str | None:
        """The stop line once an agent's streak reaches the limit, else None."""
        stuck = [(name, n) for name, n in self.streaks.items() if n >= self.limit]
        if not stuck:
            return None
        name, n = max(stuck, key=lambda item: item[1])
        return (
            f"agent {name}: non-finite loss or gradient norm in {n} steps in a row (steps {step - n + 1}–{step}), "
            f"each skipped, so its weights are still the last finite ones; {last_checkpoint_line(self.run_dir)}. "
            "Lower train.lr or train.grad_clip, or check the data, then resume from that checkpoint"
        )
