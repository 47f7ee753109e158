"""The one training loop: ``fit(cohort, callbacks)`` runs cohort steps and lets callbacks do everything else.

Why one loop with callbacks: ``corl-vl train``, ``corl-vl demo`` and the toy reproduction all train a cohort the
same way and differ only in what happens around the steps (checkpoints, metrics files, a progress bar, held-out
evaluation, stall detection, signal handling). Those are :class:`Callback` objects (:mod:`corl_vl.train.callbacks`
has the standard ones), so a research script can add its own hook without copying the loop.

Order of hooks: ``on_fit_start`` (in list order) → per step ``on_step_end`` (in list order, so a callback may read
what an earlier one put on the run, e.g. a stall status for the progress bar) → ``on_fit_end`` (in list order,
also after a requested stop) → ``close`` (always, in reverse order, also after an error).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

StepMetrics = dict[str, dict[str, float]]  # {agent name: {metric: value}}


@dataclass
class TrainingRun:
    """What callbacks see and may change: the cohort, where the loop is, the last step's metrics, the record."""

    cohort: Any
    max_steps: int
    run_dir: Path | None = None
    start_step: int = 0
    completed: int = 0  # steps done so far (the index of the next step to run)
    metrics: StepMetrics = field(default_factory=dict)  # the last step's, callbacks may add entries
    seconds: float = 0.0  # the last step's wall time
    status: str | None = None  # a short message for the progress bar (e.g. a stall warning), reset per step
    stop_reason: str | None = None  # set with request_stop: the loop ends after the current step
    history: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # {agent: [{"step", metrics…}]}
    evals: list[dict[str, Any]] = field(default_factory=list)  # periodic evaluations, see PeriodicEval

    @property
    def step_index(self) -> int:
        """The index of the step that just ran (metrics files key rows by it)."""
        return self.completed - 1

    def request_stop(self, reason: str) -> None:
        """End the loop after the current step; ``on_fit_end`` still runs (e.g. a checkpoint is saved)."""
        self.stop_reason = self.stop_reason or reason


class Callback:
    """Base class: override the hooks you need (each gets the :class:`TrainingRun`)."""

    def on_fit_start(self, run: TrainingRun) -> None:
        """Before the first step (after a resume, before the first *new* step)."""

    def on_step_end(self, run: TrainingRun) -> None:
        """After every step; ``run.metrics`` holds its metrics."""

    def on_fit_end(self, run: TrainingRun) -> None:
        """After the last step, or after the step in which a stop was requested."""

    def close(self, run: TrainingRun) -> None:
        """Release files and displays; runs even when a step raised."""


def fit(
    cohort: Any,
    callbacks: Sequence[Callback] = (),
    *,
    max_steps: int | None = None,
    start_step: int | None = None,
    run_dir: str | Path | None = None,
) -> TrainingRun:
    """Train ``cohort`` from ``start_step`` (default: its current step) to ``max_steps`` (default:
    ``train.max_steps``); returns the :class:`TrainingRun` with every step's metrics in ``history``.

    ``callbacks``: e.g. :func:`corl_vl.train.callbacks.standard_callbacks` for what ``corl-vl train`` does.
    """
    start = cohort.step_index if start_step is None else start_step
    run = TrainingRun(
        cohort=cohort,
        max_steps=cohort.cfg.train.max_steps if max_steps is None else max_steps,
        run_dir=Path(run_dir) if run_dir is not None else None,
        start_step=start,
        completed=start,
        history={agent.name: [] for agent in cohort.agents},
    )
    try:
        for callback in callbacks:
            callback.on_fit_start(run)
        while run.completed < run.max_steps and run.stop_reason is None:
            started = time.perf_counter()
            run.metrics = cohort.step()
            run.seconds = time.perf_counter() - started
            run.completed += 1
            run.status = None
            for name, rows in run.history.items():
                rows.append({"step": run.step_index, **run.metrics[name]})
            for callback in callbacks:
                callback.on_step_end(run)
        for callback in callbacks:
            callback.on_fit_end(run)
    finally:
        for callback in reversed(callbacks):
            callback.close(run)
    return run
