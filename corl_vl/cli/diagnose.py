"""``corl-vl diagnose``: are two (or more) models' errors decoupled enough to make good Co-RL partners?

Reads each model's per-problem answers (rows keyed by id), and reports Cohen's κ, error overlap, complementarity
and a recommendation (paper App. A; see :mod:`corl_vl.science.diagnostics`). Or, given ``--model`` twice (or more) and a
problem set with answers, first generates one answer per problem per model through the training adapters and
rollout engines (the paper's protocol: zero-shot, one sample at T = 0.8), writes ``DIR/<model>.jsonl``, and
diagnoses those files — so the numbers can be re-read later with ``--answers``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from corl_vl.errors import CorlError


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "diagnose",
        help="error decoupling between models: kappa, error overlap, complementarity",
        description=(
            "Compare models' per-problem correctness. Each --answers JSONL line has 'id' and either 'correct' "
            "(bool) or 'response'/'extracted' (graded against 'answer' in the line or in --gold, keyed by id). "
            "Or give --model twice (or more) and --data: one answer per problem per model is generated first."
        ),
    )
    parser.add_argument("--answers", action="append", metavar="FILE.jsonl", help="one per model (≥ 2)")
    gen = parser.add_argument_group("generating the answers (instead of --answers)")
    gen.add_argument(
        "--model", action="append", metavar="M", help="preset or checkpoint folder, one per model"
    )
    gen.add_argument("--data", type=Path, help="problems with answers (file or save_to_disk folder)")
    gen.add_argument("--split", help="split of a DatasetDict folder")
    gen.add_argument("--limit", type=int, help="only the first N problems (the paper: 500 MATH problems)")
    gen.add_argument("--temperature", type=float, help="sampling temperature (default 0.8)")
    gen.add_argument("--top-p", type=float, help="nucleus sampling (default 1.0)")
    gen.add_argument("--max-new-tokens", type=int, help="response cap (default 1024)")
    gen.add_argument("--seed", type=int, help="sampling seed (default 0)")
    gen.add_argument("--engine", choices=("hf", "vllm"), help="rollout engine (default hf)")
    gen.add_argument("--batch-size", type=int, help="prompts per engine call (default 8)")
    gen.add_argument("--device", help="torch device for the hf engine (default cpu)")
    gen.add_argument("--output-dir", type=Path, help="answers files (default runs/diagnose)")
    parser.add_argument(
        "--gold", metavar="G.jsonl", help="gold answers: lines with 'id', 'answer' [, 'choices']"
    )
    parser.add_argument(
        "--extraction",
        default="lenient",
        choices=("strict", "lenient"),
        help="answer extraction for rows graded from a response (default lenient, as grade/eval; strict: the "
        "markers peer votes read)",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.set_defaults(func=run)


# the generating options (only with --model) and their defaults
_GENERATION = {
    "data": None,
    "split": None,
    "limit": None,
    "temperature": 0.8,
    "top_p": 1.0,
    "max_new_tokens": 1024,
    "seed": 0,
    "engine": "hf",
    "batch_size": 8,
    "device": "cpu",
    "output_dir": Path("runs/diagnose"),
}


def _generation_options(args: argparse.Namespace) -> None:
    """Refuse generating options beside --answers (they would be ignored), then fill in the defaults."""
    if not args.model:
        given = [d for d in _GENERATION if getattr(args, d) is not None]
        if given:
            raise CorlError(
                f"--{given[0].replace('_', '-')} applies to generating answers (--model); --answers files are "
                "diagnosed as they are, drop it"
            )
    for dest in ("limit", "max_new_tokens", "batch_size"):
        value = getattr(args, dest)
        if value is not None and value < 1:
            raise CorlError(f"--{dest.replace('_', '-')} must be at least 1, got {value}")
    for dest, default in _GENERATION.items():
        if getattr(args, dest) is None:
            setattr(args, dest, default)


def _fmt(value: float | None, spec: str = ".3f") -> str:
    return "n/a" if value is None else format(value, spec)


def run(args: argparse.Namespace) -> int:
    # lazy: cli-help, rich
    from rich.console import Console
    from rich.table import Table

    from corl_vl.science.diagnostics import diagnose, generate_answers

    _generation_options(args)
    if args.model:
        if args.answers or args.gold:
            raise CorlError(
                "give either --answers files or --model with --data, not both (--gold: --answers only)"
            )
        if len(args.model) < 2 or args.data is None:
            raise CorlError("generating answers needs at least two --model values and --data")
        paths = generate_answers(
            args.model,
            args.data,
            args.output_dir,
            split=args.split,
            limit=args.limit,
            temperature=args.temperature,
            top_p=args.top_p,
            max_new_tokens=args.max_new_tokens,
            seed=args.seed,
            engine=args.engine,
            batch_size=args.batch_size,
            device=args.device,
            progress=not args.json,
            extraction=args.extraction,
        )
        if not args.json:
            print(f"wrote {', '.join(str(p) for p in paths)}")
        report = diagnose(paths, extraction=args.extraction)
    elif args.answers:
        report = diagnose(args.answers, args.gold, extraction=args.extraction)
    else:
        raise CorlError("give --answers A.jsonl --answers B.jsonl, or --model A --model B --data D")
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
