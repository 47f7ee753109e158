"""``corl-vl plot RUN_DIR``: PNG curves (one per metric, one line per agent) from a run's metrics.jsonl files."""

from __future__ import annotations

import argparse
from pathlib import Path

from corl_vl.errors import CorlError


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "plot",
        help="draw a run's training curves as PNGs",
        description="Draw a run's training curves as PNGs.",
    )
    parser.add_argument("run_dir", metavar="RUN_DIR", help="a run folder written by `corl-vl train`")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # lazy: cli-help
    from corl_vl.train.reporting import plot_run, read_metrics

    run_dir = Path(args.run_dir)
    if not read_metrics(run_dir):
        raise CorlError(f"{run_dir}: no agents/*/metrics.jsonl here (is it a run folder?)")
    for path in plot_run(run_dir):
        print(path)
    return 0
