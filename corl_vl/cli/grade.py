"""``corl-vl grade``: grade a JSONL of responses (extract + equivalence) and print the accuracy.

Each input line is a JSON object with ``response`` and ``answer`` and optionally ``choices`` / ``options``,
``question_type``, ``answer_type``, ``precision``, ``id``. ``--extraction lenient`` (default) also reads answers
from free prose, ``strict`` only explicit markers (as peer votes); ``--scoring official --benchmark NAME``
applies that benchmark's published rules instead of math equivalence (``--benchmark`` needs it). The output
keeps every field and adds ``extracted`` and ``correct``; it is written to a temporary file and renamed, so a
failed run never leaves half a file.
Comparisons run on threads while math-verify runs in ``--workers`` processes (default: all cores).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from corl_vl.answers import grade_record
from corl_vl.answers.clean import encodable
from corl_vl.answers.mathverify_pool import set_max_workers
from corl_vl.errors import CorlError
from corl_vl.eval.scoring import get_scorer
from corl_vl.io import check_answer_value, check_output_path, read_jsonl, write_jsonl_atomic


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "grade",
        help="grade responses.jsonl against its answers (extraction + math equivalence)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--input", required=True, type=Path, help="JSONL with response and answer per line")
    p.add_argument(
        "--output", required=True, type=Path, help="graded JSONL (input fields + extracted, correct)"
    )
    p.add_argument("--workers", type=int, default=None, help="math-verify processes (default: all cores)")
    p.add_argument(
        "--timeout", type=float, default=None, help="seconds per math-verify comparison (default 5)"
    )
    p.add_argument(
        "--extraction",
        default="lenient",
        choices=("strict", "lenient"),
        help="answer extraction: lenient (default; free prose too) or strict (markers only, as peer votes)",
    )
    p.add_argument(
        "--scoring",
        default="verified",
        choices=("verified", "official", "quick-match"),
        help="verified (default; math equivalence), official (the --benchmark's published rules) or quick-match "
        "(MathVerse's --quick_match exact match in place of its judge)",
    )
    p.add_argument(
        "--benchmark", help="benchmark whose official rules --scoring official applies (e.g. mathvista)"
    )
    p.add_argument("--no-progress", action="store_true", help="do not show a progress bar")
    p.set_defaults(func=run)


def _check_list(record: dict[str, Any], key: str, where: str) -> None:
    value = record.get(key)
    if value is not None and (
        not isinstance(value, list) or not all(isinstance(v, (str, int, float)) for v in value)
    ):
        raise CorlError(f"{where}: field {key!r} must be a list of strings, got {value!r:.80}")


def read_records(path: Path) -> list[dict[str, Any]]:
    """Parse and validate the input; a bad line raises CorlError naming its line number."""
    records = []
    for lineno, record in read_jsonl(path):
        where = f"{path}:{lineno}"
        for key in ("response", "answer"):
            if key not in record:
                raise CorlError(f"{where}: missing field {key!r}")
        if not isinstance(record["response"], str):
            raise CorlError(f"{where}: field 'response' must be a string")
        check_answer_value(record["answer"], f"{where} field 'answer'")  # NaN, true, a list: not graded
        _check_list(record, "choices", where)
        _check_list(record, "options", where)
        precision = record.get("precision")
        if precision is not None and (
            isinstance(precision, bool)
            or not isinstance(precision, (int, float))
            or precision != int(precision)
        ):
            raise CorlError(f"{where}: field 'precision' must be an integer, got {precision!r}")
        records.append(record)
    return records


def _official_scorer(args: argparse.Namespace) -> Any:
    """The benchmark scorer whose official rules grade each line; None for verified scoring."""
    if args.scoring == "verified":
        if args.benchmark is not None:
            get_scorer(args.benchmark)  # an unknown name is still an error
            raise CorlError(
                f"--benchmark {args.benchmark} picks the published rules of --scoring official; verified scoring "
                "(the default) grades every line by math equivalence. Add --scoring official or drop --benchmark"
            )
        return None
    if args.benchmark is None:
        raise CorlError(f"--scoring {args.scoring} needs --benchmark NAME (whose published rules to apply)")
    check_quick_match(args.scoring, [args.benchmark])
    return get_scorer(args.benchmark, scoring=args.scoring, extraction=args.extraction)


def check_quick_match(scoring: str, benchmarks: list[str]) -> None:
    """``quick-match`` changes only MathVerse's official judge; refuse it for anything else (it would be ignored)."""
    other = [b for b in benchmarks if b != "mathverse"]
    if scoring == "quick-match" and other:
        raise CorlError(
            f"--scoring quick-match replaces MathVerse's official judge by its --quick_match rule; {other[0]} has "
            "one official rule: use --scoring official"
        )


def run(args: argparse.Namespace) -> int:
    # lazy: cli-help, rich
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    from corl_vl.eval.scoring.records import record_problem

    if args.workers is not None and args.workers < 1:
        raise CorlError(f"--workers must be at least 1, got {args.workers}")
    if args.timeout is not None and not (math.isfinite(args.timeout) and args.timeout > 0):
        raise CorlError(f"--timeout must be a positive, finite number of seconds, got {args.timeout}")
    check_output_path(args.output, folder=False, flag="--output")
    scorer = _official_scorer(args)
    records = read_records(args.input)
    workers = args.workers or os.cpu_count() or 1
    set_max_workers(workers)
    graded: list[dict[str, Any]] = [{} for _ in records]

    def one(index: int) -> None:
        record = records[index]
        if scorer is not None:
            problem = record_problem(record, index)
            extracted = scorer.official_extract(problem, record["response"])
            correct = scorer.official_judge(problem, extracted)
        else:
            result = grade_record(record, extraction=args.extraction, timeout=args.timeout)
            extracted, correct = result.extracted, result.correct
        graded[index] = {**record, "extracted": extracted, "correct": correct}

    with (
        Progress(
            TextColumn("grading"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeRemainingColumn(),
            disable=args.no_progress or not sys.stderr.isatty(),
            console=Console(stderr=True),
        ) as progress,
        ThreadPoolExecutor(max_workers=workers) as pool,
    ):
        task = progress.add_task("grading", total=len(records))
        for _ in pool.map(one, range(len(records))):
            progress.advance(task)
    cleaned = [
        encodable(row) for row in graded
    ]  # a lone surrogate cannot be written as UTF-8: U+FFFD, counted
    write_jsonl_atomic(args.output, [row for row, _ in cleaned])
    replaced = sum(n for _, n in cleaned)
    if replaced:
        print(f"corl-vl grade: {replaced} unencodable character(s) written as U+FFFD", file=sys.stderr)
    n_correct = sum(r["correct"] for r in graded)
    if records:
        print(f"accuracy: {n_correct / len(records):.4f} ({n_correct}/{len(records)}) -> {args.output}")
    else:
        print(f"accuracy: n/a (0 records) -> {args.output}")
    return 0
