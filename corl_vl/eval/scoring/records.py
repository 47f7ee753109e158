"""Benchmark-shaped JSONL records (``corl-vl grade`` input, published graded outputs) as scorer problems.

Why: the official rules need the benchmark's fields (MathVista ``question_type``/``answer_type``/``precision``,
MathVision ``options``), and ``corl-vl grade`` reads them straight from each line instead of from the benchmark.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from corl_vl.answers.grading import record_choices
from corl_vl.data.problem import Problem

_META_KEYS = ("question_type", "answer_type", "precision", "unit", "group", "step", "steps")


def record_problem(record: Mapping[str, Any], index: int = 0) -> Problem:
    """A problem with the record's id (or its line index), answer, options and benchmark fields."""
    meta = {key: record[key] for key in _META_KEYS if key in record}
    return Problem(
        id=str(record.get("id", index)),
        question=str(record.get("question", "")),
        choices=record_choices(record),
        answer=str(record["answer"]),
        meta=meta,
    )
