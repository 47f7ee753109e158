"""MathVista (``AI4Math/MathVista``; repository ``data/testmini.json``, a dict keyed by ``pid``).

Free-form answers are scored after normalising to the answer type (integer, float rounded to ``precision``,
list), so the question carries the same kind of format hint the official queries add; otherwise a model has
no way to know that "1.2" and not "1.19" is wanted.
"""

from __future__ import annotations

from typing import Any

from corl_vl.data.problem import Problem
from corl_vl.eval.benchmark_rows import RowContext, answer_text, as_text, record_images, require

# Metadata fields the official calculate_score.py breaks accuracy down by (besides question/answer type).
METADATA_KEYS = ("language", "source", "category", "task", "context", "grade", "skills")


def format_hint(answer_type: str, precision: int | None) -> str:
    """The answer-format hint for a free-form question (multiple choice gets its options instead)."""
    if answer_type == "integer":
        return "Answer with an integer."
    if answer_type == "float":
        places = precision if precision is not None else 1
        return f"Answer with a number with {places} decimal place{'s' if places != 1 else ''}."
    if answer_type == "list":
        return "Answer with a Python list, e.g. [1, 2, 3]."
    return ""


def to_problem(row: dict[str, Any], ctx: RowContext) -> Problem:
    pid = as_text(require(row, "pid", ctx))
    question = str(require(row, "question", ctx, pid))
    answer = answer_text(require(row, "answer", ctx, pid), ctx, pid)
    question_type = str(require(row, "question_type", ctx, pid))
    answer_type = str(require(row, "answer_type", ctx, pid))
    precision = row.get("precision")
    precision = int(precision) if precision is not None else None
    choices = (
        [str(c) for c in row["choices"]] if question_type == "multi_choice" and row.get("choices") else None
    )
    if question_type == "multi_choice" and not choices:
        require(row, "choices", ctx, pid)
    metadata = row.get("metadata") or {}
    meta: dict[str, Any] = {
        "question_type": question_type,
        "answer_type": answer_type,
        "precision": precision,
        "unit": row.get("unit"),
    }
    for key in METADATA_KEYS:
        if key in metadata:
            meta[key] = metadata[key]
    hint = "" if choices else format_hint(answer_type, precision)
    images = record_images(row, ("decoded_image", "image"), ctx, pid)
    text = f"{question.strip()}\n{hint}" if hint else question.strip()
    return Problem(id=pid, question=text, images=images, choices=choices, answer=answer, meta=meta)
