"""The scripting functions above the packages: ``corl_vl.evaluate`` (each agent's greedy answers to a set of
problems, with the training prompt format and answer extraction: the one greedy evaluator,
:mod:`corl_vl.eval.greedy`, through validation's metrics) and ``corl_vl.evaluate_protocol`` (``corl-vl eval
--protocol`` from Python).

Why here: :func:`evaluate_protocol` drives the ``eval`` command, and ``corl_vl.cli`` imports ``corl_vl.eval``, so
the function sits above both rather than in ``corl_vl.eval``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from corl_vl.cli import build_parser
from corl_vl.cli.eval import run
from corl_vl.data.problem import Problem
from corl_vl.train.validation import greedy_validation


def evaluate(
    cohort: Any, problems: Sequence[Problem], *, max_new_tokens: int | None = None
) -> dict[str, dict[str, Any]]:
    """Each agent's greedy answers to ``problems``: ``{agent: {"eval/accuracy", "eval/parsed_frac",
    "eval/peer_agreement"}}`` (accuracy only where the problems have answers). ``max_new_tokens`` defaults to
    the training budget ``grpo.max_new_tokens``."""
    budget = max_new_tokens if max_new_tokens is not None else cohort.cfg.grpo.max_new_tokens
    return greedy_validation(list(problems), budget)(cohort)


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
