"""Run records: per-agent ``metrics.jsonl`` (written by :class:`corl_vl.train.callbacks.MetricsLog`), reading
them back, and PNG curves.

Why several sinks: the progress bar is for the person watching (step, reward, agreement, s/step); the JSONL
files are the durable record (one line per step per agent; a resumed run first drops lines past its
checkpoint, so the file reads as one uninterrupted run); TensorBoard and the PNGs are for comparing curves.

Layout::

    RUN_DIR/agents/<agent>/metrics.jsonl   {"step": 0, "reward/mean": …, …} per line
    RUN_DIR/tensorboard/<agent>/           event files
    RUN_DIR/plots/<metric>.png             one figure per metric, one line per agent
"""

from __future__ import annotations

import math
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


def clean_value(value: float) -> float | None:
    """JSON has no NaN: a metric that did not apply is written as null."""
    value = float(value)
    return None if math.isnan(value) or math.isinf(value) else value


def plot_run(run_dir: str | Path, metrics: tuple[str, ...] = PLOTTED) -> list[Path]:
    """One PNG per metric under ``RUN_DIR/plots`` (one line per agent); returns the files written."""
    # lazy: matplotlib
    import matplotlib

    matplotlib.use("Agg")
    # lazy: matplotlib
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
    written += plot_reliability(records, out_dir)
    return written


def plot_reliability(records: dict[str, list[dict]], out_dir: Path) -> list[Path]:
    """Co-RL runs: each agent's label-free reliability estimates against its actual sample accuracy (gold,
    monitoring only), the pseudo-label accuracy each ``reward.weighting`` would give (rewards/supervision.py),
    and the labels' accuracy with the reward, where the problems have golds."""
    # lazy: matplotlib
    import matplotlib.pyplot as plt

    def series(rows: list[dict], key: str) -> tuple[list[int], list[float]]:
        points = [(r["step"], r[key]) for r in rows if r.get(key) is not None]
        return ([x for x, _ in points], [y for _, y in points]) if points else ([], [])

    panels = {  # a panel is drawn when some agent has its second line's metric
        "reliability.png": [
            ("answer/accuracy", "-", "actual"),
            ("reliability/dawid_skene", "--", "Dawid–Skene"),
            ("reliability/agreement", ":", "agreement"),
        ],
        # where golds exist: how right the pseudo-labels were, next to the reward they gave
        "label_accuracy_and_reward.png": [
            ("reward/mean", "--", "reward"),
            ("label/accuracy", "-", "label accuracy"),
            ("answer/accuracy", ":", "answer accuracy"),
        ],
        "label_accuracy_by_weighting.png": [
            ("label/accuracy_uniform", "-", "uniform"),
            ("label/accuracy_agreement", ":", "agreement"),
            ("label/accuracy_dawid_skene", "--", "Dawid–Skene"),
        ],
    }
    written = []
    for name, lines in panels.items():
        if not any(series(rows, lines[1][0])[0] for rows in records.values()):
            continue
        fig, ax = plt.subplots(figsize=(6, 3.6), dpi=100)
        for colour, (agent, rows) in enumerate(records.items()):
            for key, style, label in lines:
                xs, ys = series(rows, key)
                if xs:
                    ax.plot(xs, ys, style, color=f"C{colour}", label=f"{agent}: {label}")
        ax.set_xlabel("step")
        ax.set_ylim(-0.02, 1.02)
        ax.set_title(name.removesuffix(".png").replace("_", " "))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6, ncol=2)
        fig.tight_layout()
        fig.savefig(out_dir / name)
        plt.close(fig)
        written.append(out_dir / name)
    return written
