"""``corl-vl diagnose``: are two (or more) models' errors decoupled enough to make good Co-RL partners?

Reads each model's per-problem answers (rows keyed by id), and reports Cohen's κ, error overlap, complementarity
and a recommendation (paper App. A; see :mod:`corl_vl.diagnostics`). Generating the answers from models and a
problem set needs the rollout engine and is not offered here yet.
"""

from __future__ import annotations

import argparse
import json


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "diagnose",
        help="error decoupling between models: kappa, error overlap, complementarity",
        description=(
            "Compare models' per-problem correctness. Each --answers JSONL line has 'id' and either 'correct' "
            "(bool) or 'response'/'extracted' (graded against 'answer' in the line or in --gold, keyed by id)."
        ),
    )
    parser.add_argument(
        "--answers", action="append", required=True, metavar="FILE.jsonl", help="one per model (≥ 2)"
    )
    parser.add_argument(
        "--gold", metavar="G.jsonl", help="gold answers: lines with 'id', 'answer' [, 'choices']"
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.set_defaults(func=run)


def _fmt(value: float | None, spec: str = ".3f") -> str:
    return "n/a" if value is None else format(value, spec)


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from corl_vl.diagnostics import diagnose

    report = diagnose(args.answers, args.gold)
    if args.json:
        print(json.dumps(report))
        return 0
    pairs = report.get("pairs") or [{"a": report["models"][0], "b": report["models"][1], **report}]
    table = Table(title=f"Error decoupling on {report['n']} problems")
    for column in ("A", "B", "acc A", "acc B", "κ (± se)", "overlap", "P(B✗|A✗)", "c %"):
        table.add_column(column, overflow="fold")
    for pair in pairs:
        kappa = "n/a" if pair["kappa"] is None else f"{pair['kappa']:.3f} ± {pair['kappa_se']:.3f}"
        table.add_row(
            pair["a"],
            pair["b"],
            _fmt(pair["accuracy_a"]),
            _fmt(pair["accuracy_b"]),
            kappa,
            _fmt(pair["error_overlap"]),
            _fmt(pair["p_b_wrong_given_a_wrong"]),
            _fmt(pair["complementarity"], ".1f"),
        )
    console = Console()
    console.print(table)
    for pair in pairs:
        console.print(f"{pair['a']} vs {pair['b']}: {pair['recommendation']}", markup=False, highlight=False)
    return 0
