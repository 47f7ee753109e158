"""What a person watching a run sees: a progress bar on a terminal, else one plain log line every few steps,
and one warning after the first step when nothing can train.

Why the plain lines: piped output (a cluster's log file, CI) cannot show a bar, and a run that prints nothing
for an hour looks hung. Why the first-step check: a cohort whose agents parse no answer gets no labels and
trains nothing; the metrics say so, but only to someone who knows where to look.
"""

from __future__ import annotations

import logging
import math
from typing import Any

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from corl_vl.train.loop import Callback, TrainingRun

log = logging.getLogger("corl_vl")


def step_summary(run: TrainingRun) -> list[str]:
    """``["1.2 s/step", "agent-a: reward 0.41 agree 0.80", …]`` for the step that just ran."""
    parts = [f"{run.seconds:.1f} s/step"]
    for name, values in run.metrics.items():
        if name == "cohort":
            continue
        agree = values.get("peer/agreement")
        parts.append(
            f"{name}: reward {values.get('reward/mean', math.nan):.2f}"
            + (f" agree {agree:.2f}" if agree is not None else "")
        )
    return parts


class ProgressBar(Callback):
    """A rich progress bar: step, s/step, each agent's reward (and peer agreement), and ``run.status``."""

    def __init__(self) -> None:
        self._progress: Any = None
        self._task: Any = None

    def on_fit_start(self, run: TrainingRun) -> None:
        self._progress = Progress(
            TextColumn("[bold]train"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeRemainingColumn(),
            TextColumn("{task.fields[info]}"),
        )
        self._progress.start()
        self._task = self._progress.add_task("train", total=run.max_steps, completed=run.start_step, info="")

    def on_step_end(self, run: TrainingRun) -> None:
        parts = step_summary(run)
        if run.status:
            parts.append(f"[bold red]{run.status}[/]")
        self._progress.update(self._task, completed=run.completed, info=" | ".join(parts))

    def close(self, run: TrainingRun) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None


class PlainProgress(Callback):
    """One INFO line every ``every`` steps (default: about 20 lines per run) and after the last step."""

    def __init__(self, every: int | None = None) -> None:
        self.every = every

    def on_step_end(self, run: TrainingRun) -> None:
        every = self.every or max(1, run.max_steps // 20)
        if run.completed % every == 0 or run.completed == run.max_steps:
            status = f" | {run.status}" if run.status else ""
            log.info("step %d/%d | %s%s", run.completed, run.max_steps, " | ".join(step_summary(run)), status)


class FirstStepCheck(Callback):
    """After the first step of a run: warn once when no agent trained a row because none parsed an answer or
    got a label."""

    def __init__(self) -> None:
        self.done = False

    def on_step_end(self, run: TrainingRun) -> None:
        if self.done:
            return
        self.done = True
        agents = {k: v for k, v in run.metrics.items() if k != "cohort"}
        # rewards that read no answer (a plug-in, format/length, entropy) train rows without one: then say nothing
        # (rows of groups with equal rewards train only grpo.beta's KL term: still nothing learned from rewards)
        if any(_learned(v) for v in agents.values()):
            return
        parsed = [v.get("answer/parsed_frac", 0.0) for v in agents.values()]
        labelled = [v["label/coverage"] for v in agents.values() if "label/coverage" in v]
        if all(p == 0 for p in parsed) or (labelled and all(c == 0 for c in labelled)):
            what = "parsed no answer" if all(p == 0 for p in parsed) else "got no label"
            log.warning(
                "step %d: every agent %s, so nothing trained (update/skipped). Random tiny models never answer: "
                "use `corl-vl demo` or a config with an experiment: section (warm-started bases, e.g. "
                "configs/demo.yaml). Check answer/parsed_frac and label/coverage in agents/*/metrics.jsonl.",
                run.completed,
                what,
            )


def _learned(metrics: dict[str, float]) -> bool:
    """Whether an agent's step trained rows on a reward signal (some group's rewards differed)."""
    rows = float(metrics.get("trained_rows", 0.0))
    return rows > 0 and float(metrics.get("groups/zero_std_frac", 0.0)) < 1.0


class NothingTrainedCheck(Callback):
    """At the end of a run: warn for each agent that learned nothing from its rewards in all of this process's
    steps, so a run that exits 0 having trained nothing says so. Either no row trained (every advantage 0, or
    rows masked or skipped), or rows trained only for the KL term (``grpo.beta > 0``) while every group's
    rewards were equal: a KL pull towards the reference, and on the first steps not even that."""

    def close(self, run: TrainingRun) -> None:
        steps = run.completed - run.start_step
        for agent, rows in run.history.items():
            mine = [r for r in rows if r.get("step", run.start_step) >= run.start_step]
            if steps <= 0 or not mine:
                continue
            if sum(float(r.get("trained_rows", 0.0)) for r in mine) == 0:
                log.warning(
                    "agent %s trained no row in %d step(s): every advantage was 0 (its completions of each "
                    "problem got equal rewards) or its rows were masked or skipped; see groups/zero_std_frac "
                    "and update/skipped in agents/%s/metrics.jsonl (more completions per problem, grpo.k, or "
                    "more steps give groups whose rewards differ)",
                    agent,
                    steps,
                    agent,
                )
            elif all(float(r.get("groups/zero_std_frac", 0.0)) == 1.0 for r in mine):
                log.warning(
                    "agent %s got no reward signal in %d step(s): its completions of each problem always got "
                    "equal rewards (groups/zero_std_frac 1 in agents/%s/metrics.jsonl), so every advantage was "
                    "0 and its rows trained only the KL term (more completions per problem, grpo.k, or more "
                    "steps give groups whose rewards differ)",
                    agent,
                    steps,
                    agent,
                )
