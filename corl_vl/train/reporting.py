"""Run observability: a rich progress bar, per-agent ``metrics.jsonl`` and TensorBoard, PNG curves.

Why three sinks: the progress bar is for the person watching (step, reward, agreement, s/step); the JSONL
files are the durable record (one line per step per agent; a resumed run first drops lines past its
checkpoint, so the file reads as one uninterrupted run); TensorBoard and the PNGs are for comparing curves.

Layout::

    RUN_DIR/agents/<agent>/metrics.jsonl   {"step": 0, "reward/mean": …, …} per line
    RUN_DIR/tensorboard/<agent>/           event files
    RUN_DIR/plots/<metric>.png             one figure per metric, one line per agent
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from corl_vl.io import read_jsonl, write_jsonl_atomic

PLOTTED = (
    "reward/mean",
    "label/coverage",
    "peer/agreement",
    "label/accuracy",
    "answer/accuracy",
    "answer/parsed_frac",
    "groups/zero_std_frac",
    "entropy",
    "length/mean",
    "length/clipped_frac",
    "clip/frac",
    "kl",
    "is/ratio_max",
    "grad_norm",
    "time/step",
)


def metrics_path(run_dir: Path, agent: str) -> Path:
    return run_dir / "agents" / agent / "metrics.jsonl"


def truncate_metrics(run_dir: Path, agents: list[str], next_step: int) -> None:
    """Drop records with ``step >= next_step`` (written after the checkpoint a run resumes from)."""
    for name in agents:
        path = metrics_path(run_dir, name)
        if not path.exists():
            continue
        # skip_bad: a run killed mid-write leaves its last line cut off; that line is past the checkpoint anyway
        rows = read_jsonl(path, skip_bad=True)
        write_jsonl_atomic(path, (row for _, row in rows if row["step"] < next_step))


def read_metrics(run_dir: str | Path) -> dict[str, list[dict[str, Any]]]:
    """``{agent: [records…]}`` from a run folder."""
    run_dir = Path(run_dir)
    out = {}
    for path in sorted((run_dir / "agents").glob("*/metrics.jsonl")):
        out[path.parent.name] = [row for _, row in read_jsonl(path)]
    return out


class RunLogger:
    """Writes every step's metrics to all sinks; use as a context manager around the training loop."""

    def __init__(
        self,
        run_dir: Path,
        agents: list[str],
        *,
        total_steps: int,
        start_step: int = 0,
        progress: bool = True,
    ) -> None:
        self.run_dir = run_dir
        self.agents = agents
        self.total_steps = total_steps
        self.start_step = start_step
        self.show_progress = progress
        self._writers: dict[str, Any] = {}
        self._files: dict[str, Any] = {}
        self._progress: Any = None
        self._task: Any = None

    def __enter__(self) -> RunLogger:
        from torch.utils.tensorboard import SummaryWriter

        for name in self.agents:
            path = metrics_path(self.run_dir, name)
            path.parent.mkdir(parents=True, exist_ok=True)
            self._files[name] = path.open("a")
            self._writers[name] = SummaryWriter(
                str(self.run_dir / "tensorboard" / name), purge_step=self.start_step
            )
        if self.show_progress:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            self._progress = Progress(
                TextColumn("[bold]train"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                TextColumn("{task.fields[info]}"),
            )  # fmt: skip
            self._progress.start()
            self._task = self._progress.add_task(
                "train", total=self.total_steps, completed=self.start_step, info=""
            )
        return self

    def log(self, step: int, metrics: Mapping[str, Mapping[str, float]], seconds: float) -> None:
        """Record one step (``metrics`` = ``{agent: {name: value}}``) and advance the bar."""
        for name in self.agents:
            record = {"step": step, **{k: _clean(v) for k, v in metrics[name].items()}, "time/step": seconds}
            self._files[name].write(json.dumps(record) + "\n")
            self._files[name].flush()
            writer = self._writers[name]
            for key, value in record.items():
                if key != "step" and value is not None:
                    writer.add_scalar(key, value, step)
        if self._progress is not None:
            parts = [f"{seconds:.1f} s/step"]
            for name in self.agents:
                m = metrics[name]
                agree = m.get("peer/agreement")
                parts.append(
                    f"{name}: reward {m.get('reward/mean', math.nan):.2f}"
                    + (f" agree {agree:.2f}" if agree is not None else "")
                )
            self._progress.update(self._task, completed=step + 1, info=" | ".join(parts))

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.stop()
        for f in self._files.values():
            f.close()
        for w in self._writers.values():
            w.close()


def _clean(value: float) -> float | None:
    """JSON has no NaN: a metric that did not apply is written as null."""
    value = float(value)
    return None if math.isnan(value) or math.isinf(value) else value


def plot_run(run_dir: str | Path, metrics: tuple[str, ...] = PLOTTED) -> list[Path]:
    """One PNG per metric under ``RUN_DIR/plots`` (one line per agent); returns the files written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    run_dir = Path(run_dir)
    records = read_metrics(run_dir)
    out_dir = run_dir / "plots"
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for key in metrics:
        series = {
            agent: [(r["step"], r[key]) for r in rows if r.get(key) is not None]
            for agent, rows in records.items()
        }
        series = {a: s for a, s in series.items() if s}
        if not series:
            continue
        fig, ax = plt.subplots(figsize=(5, 3.2), dpi=100)
        for agent, points in series.items():
            xs, ys = zip(*points)
            ax.plot(xs, ys, label=agent, marker="." if len(xs) < 30 else None)
        ax.set_xlabel("step")
        ax.set_title(key)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        path = out_dir / (key.replace("/", "_") + ".png")
        fig.savefig(path)
        plt.close(fig)
        written.append(path)
    return written
