"""The standard callbacks of :func:`corl_vl.train.loop.fit`: metrics files, progress bar, checkpoints, stall
detection and periodic evaluation.

Why separate objects: each one is a concern a run may or may not want (the toy benchmark keeps no metrics
files, a script may want no progress bar), and each is tested on its own. :func:`standard_callbacks` assembles
what ``corl-vl train`` and ``corl-vl demo`` use.

Metric sinks (``train.report_to``): the JSONL files are always written — they are the durable record and what
a resumed run truncates; ``tensorboard`` and ``wandb`` are extra; ``none`` means JSONL only.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from corl_vl.config import to_dict
from corl_vl.errors import CorlError
from corl_vl.train.checkpoint import prune_checkpoints, save_checkpoint
from corl_vl.train.completion_log import CompletionLog
from corl_vl.train.loop import Callback, StepMetrics, TrainingRun
from corl_vl.train.progress import FirstStepCheck, NothingTrainedCheck, PlainProgress, ProgressBar
from corl_vl.train.reporting import clean_value, metrics_path
from corl_vl.train.stall import StallMonitor
from corl_vl.train.validation import PeriodicEval

if TYPE_CHECKING:
    from corl_vl.data.sources import SyntheticScope


class MetricsLog(Callback):
    """One JSON line per step per agent (``RUN_DIR/agents/<agent>/metrics.jsonl``), plus TensorBoard / wandb."""

    def __init__(self, run_dir: Path, agents: list[str], report_to: list[str] | tuple[str, ...] = ()) -> None:
        self.run_dir, self.agents, self.report_to = Path(run_dir), agents, set(report_to) - {"none"}
        self._files: dict[str, Any] = {}
        self._writers: dict[str, Any] = {}
        self._wandb: Any = None

    def on_fit_start(self, run: TrainingRun) -> None:
        for name in self.agents:
            path = metrics_path(self.run_dir, name)
            path.parent.mkdir(parents=True, exist_ok=True)
            self._files[name] = path.open("a")
        if "tensorboard" in self.report_to and self.agents:
            # lazy: tensorboard (a slow import, made only when TensorBoard is wanted)
            from torch.utils.tensorboard import SummaryWriter

            for name in self.agents:
                log_dir = str(self.run_dir / "tensorboard" / name)
                self._writers[name] = SummaryWriter(log_dir, purge_step=run.start_step)
        if "wandb" in self.report_to and self.agents:
            self._wandb = _start_wandb(self.run_dir, run)

    def on_step_end(self, run: TrainingRun) -> None:
        self.write(run.step_index, run.metrics, run.seconds)

    def write(self, step: int, metrics: StepMetrics, seconds: float | None = None) -> None:
        """Record one step's ``{agent: {metric: value}}`` in every sink."""
        logged: dict[str, float] = {}
        for name in self.agents:
            record: dict[str, Any] = {"step": step, **{k: clean_value(v) for k, v in metrics[name].items()}}
            if seconds is not None:
                record["time/step"] = seconds
            self._files[name].write(json.dumps(record) + "\n")
            self._files[name].flush()
            for key, value in record.items():
                if key == "step" or value is None:
                    continue
                if name in self._writers:
                    self._writers[name].add_scalar(key, value, step)
                logged[f"{name}/{key}"] = value
        if self._wandb is not None:
            self._wandb.log(logged, step=step)

    def write_table(self, agent: str, step: int, columns: list[str], rows: list[dict[str, Any]]) -> None:
        """Rows of text (e.g. completions) as a TensorBoard text table and a wandb table, where those are on."""
        if agent in self._writers:
            cells = [
                [str(row.get(c, "")).replace("|", "\\|").replace("\n", " ") for c in columns] for row in rows
            ]
            table = "\n".join(
                ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
                + ["| " + " | ".join(line) + " |" for line in cells]
            )
            self._writers[agent].add_text("completions", table, step)
        if self._wandb is not None:
            # lazy: wandb
            import wandb

            data = [[row.get(c) for c in columns] for row in rows]
            self._wandb.log({f"{agent}/completions": wandb.Table(columns=columns, data=data)}, step=step)

    def close(self, run: TrainingRun) -> None:
        for file in self._files.values():
            file.close()
        for writer in self._writers.values():
            writer.close()
        if self._wandb is not None:
            self._wandb.finish()
        self._files, self._writers, self._wandb = {}, {}, None


def _start_wandb(run_dir: Path, run: TrainingRun) -> Any:
    try:
        import wandb  # lazy: wandb (optional dependency: only runs that ask for report_to: [wandb] need it)
    except ImportError:
        raise CorlError("train.report_to: wandb is not installed (pip install wandb), or drop it") from None

    return wandb.init(
        project=os.environ.get("WANDB_PROJECT", "corl-vl"),
        name=run_dir.name,
        dir=str(run_dir),
        config=to_dict(run.cohort.cfg),
        resume="allow",
        id=os.environ.get("WANDB_RUN_ID"),
    )


class Checkpointing(Callback):
    """A checkpoint every ``every`` steps (0: none in between) and one at the end (also after a stop request).

    ``resumed_at_end``: the run was resumed from a checkpoint of its last step, so there is nothing new to save.
    """

    def __init__(
        self, run_dir: Path, every: int = 0, *, resumed_at_end: bool = False, keep: int = 0, main: bool = True
    ) -> None:
        self.run_dir, self.every, self.resumed_at_end = Path(run_dir), every, resumed_at_end
        self.keep, self.main = keep, main  # train.save_total_limit; only the main process deletes
        self.saved_at: int | None = None

    def on_step_end(self, run: TrainingRun) -> None:
        if self.every and run.completed % self.every == 0 and run.completed < run.max_steps:
            self._save(run)
            self.saved_at = run.completed

    def on_fit_end(self, run: TrainingRun) -> None:
        if self.saved_at == run.completed:  # a stop request right after a periodic save: nothing new
            return
        if run.completed > run.start_step or not self.resumed_at_end:
            self._save(run)

    def _save(self, run: TrainingRun) -> None:
        save_checkpoint(self.run_dir, run.cohort)
        if self.keep and self.main:
            prune_checkpoints(self.run_dir, self.keep)


class StallDetection(Callback):
    """Watches the supervision signal (:class:`~corl_vl.train.stall.StallMonitor`): a status for the progress
    bar after ``stall_steps`` dead steps; :attr:`stop` (a callback placed after the metrics sinks, so the step is
    still recorded) raises a :class:`CorlError` after twice that. In a distributed run every rank stops when any
    rank's agent stalled (the check is a collective, so every rank runs it)."""

    def __init__(self, stall_steps: int, dist: Any = None) -> None:
        self.monitor = StallMonitor(stall_steps)
        self.dist = dist
        self.stop = _StallStop(self)

    def on_step_end(self, run: TrainingRun) -> None:
        run.status = self.monitor.observe(run.metrics) or run.status

    def stop_reason(self) -> str | None:
        reason = self.monitor.stop_reason
        # a vote on the control plane: CPU data, never a tensor into NCCL (every process votes)
        voted = self.dist is not None and self.dist.any_flag(reason is not None, "the stall vote")
        if voted and reason is None:
            reason = "training stalled on another agent's ranks (its message names the agent and metric)"
        return reason


class _StallStop(Callback):
    def __init__(self, detection: StallDetection) -> None:
        self.detection = detection

    def on_step_end(self, run: TrainingRun) -> None:
        reason = self.detection.stop_reason()
        if reason is not None:
            raise CorlError(reason)


def standard_callbacks(
    cohort: Any,
    run_dir: str | Path,
    *,
    progress: bool = True,
    resumed_at_end: bool = False,
    dist: Any = None,
    scope: SyntheticScope | None = None,
) -> list[Callback]:
    """What ``corl-vl train`` runs with, in this order: periodic evaluation (``eval.every``; its results join
    the step's metrics), stall detection, metrics files (each agent's group leader writes its agent's), global
    rank 0's progress (a bar on a terminal, else a plain line every few steps) and first-step check, the
    stall stop, the non-finite stop, checkpoints. ``scope``: the synthetic validation problems' skills and view
    (an experiment's own, :class:`corl_vl.experiment.Experiment`)."""
    # lazy: transformers
    from corl_vl.train.nonfinite import NonFiniteStop

    cfg, run_dir = cohort.cfg, Path(run_dir)
    writers = [a.name for a in cohort.agents] if dist is None or dist.is_group_leader else []
    main = dist is None or dist.is_main
    stall = StallDetection(cfg.train.stall_steps, dist)
    wanted = cfg.eval.every or cfg.eval.at_start
    validation = PeriodicEval.from_config(cohort, run_dir, scope) if wanted else None
    callbacks: list[Callback] = [validation] if validation is not None else []
    sinks = MetricsLog(run_dir, writers, cfg.train.report_to)
    callbacks += [stall, sinks]
    if cfg.train.log_completions:
        callbacks.append(CompletionLog(run_dir, writers, cfg.train.log_completions, sinks))
    if validation is not None:
        callbacks.append(validation.reraise)
    if main:
        callbacks.append(ProgressBar() if progress and sys.stderr.isatty() else PlainProgress())
        callbacks += [FirstStepCheck(), NothingTrainedCheck()]
    keep = cfg.train.save_total_limit
    checkpoints = Checkpointing(
        run_dir, cfg.train.save_every, resumed_at_end=resumed_at_end, keep=keep, main=main
    )
    callbacks += [stall.stop, NonFiniteStop(run_dir, dist=dist), checkpoints]  # K non-finite steps: stop
    return callbacks
