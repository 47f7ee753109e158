"""``corl-vl eval --protocol`` from Python: :func:`evaluate_protocol` builds the command's arguments, runs it
and reads back what it wrote.

Why apart from :mod:`corl_vl.eval.protocol`: the command (:mod:`corl_vl.cli.eval`) reads the protocol table, so
the function that drives the command sits in a module the command never imports.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def evaluate_protocol(
    models: Sequence[str],
    *,
    protocol: str = "co-rl",
    benchmarks: Sequence[str] | None = None,
    data: str | None = None,
    output_dir: str | None = None,
    limit: int | None = None,
    device: str | None = None,
    progress: bool = False,
) -> dict[str, dict[str, dict[str, Any]]]:
    """``corl-vl eval --protocol PROTOCOL --model M …`` from Python: generate and score every model (a preset,
    checkpoint folder or training run folder) under the protocol; returns run label → benchmark → the
    ``results.json`` dict (each with ``protocol``, ``split`` and ``decoding``). ``output_dir`` defaults to a
    run folder's ``eval/step-N``."""
    # lazy: upward (corl_vl.cli imports corl_vl.eval; this function drives the command from Python)
    from corl_vl.cli import build_parser
    from corl_vl.cli.eval import run

    argv = (
        ["eval", "--protocol", protocol, "--no-progress"]
        if not progress
        else ["eval", "--protocol", protocol]
    )
    for model in models:
        argv += ["--model", str(model)]
    for value, flag in (
        (data, "--data"),
        (output_dir, "--output-dir"),
        (limit, "--limit"),
        (device, "--device"),
    ):
        if value is not None:
            argv += [flag, str(value)]
    if benchmarks:
        argv += ["--benchmark", ",".join(benchmarks)]
    args = build_parser().parse_args(argv)
    run(args)
    out: dict[str, dict[str, dict[str, Any]]] = {}
    root = Path(args.output_dir)
    single = root / "results.json"
    if single.is_file() and len(args.model_labels) == 1:
        result = json.loads(single.read_text())
        return {args.model_labels[0]: {result["benchmark"]: result}}
    for path in sorted(root.glob("*/*/results.json")):
        out.setdefault(path.parent.parent.name, {})[path.parent.name] = json.loads(path.read_text())
    return out
