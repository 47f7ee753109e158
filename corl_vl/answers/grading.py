"""Grade a response against a gold answer: extract, then compare; also benchmark-shaped records.

``grade`` is what evaluation, GT-reward monitoring and ``corl-vl grade`` share. ``grade_record`` reads the
fields benchmarks use (MathVista ``choices``/``question_type``/``answer_type``/``precision``, MathVision
``options``) so one JSONL of mixed benchmarks grades in one pass. This is *our* grader (mathematical
equivalence); the benchmarks' official scorers (edit-distance choice matching, integer truncation) live in
``corl_vl.eval``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from corl_vl.answers.equivalence import equivalent
from corl_vl.answers.extract import extract_answer


@dataclass(frozen=True)
class Graded:
    """The extracted answer (None when the response gives none) and whether it is correct."""

    extracted: str | None
    correct: bool

    def __bool__(self) -> bool:
        # a dataclass is always truthy: `if grade(...)` would count every response as correct
        raise TypeError("a Graded result has no truth value; use .correct")


def grade(
    response: str,
    gold: str,
    *,
    choices: Sequence[str] | None = None,
    precision: int | None = None,
    extraction: str = "lenient",
    order: Sequence[str] | None = None,
    last_number_fallback: bool = False,
    timeout: float | None = None,
) -> Graded:
    """Extract the final answer of ``response`` (``extraction``: ``lenient``, the grading default, or
    ``strict``, what peer votes use) and compare it with ``gold`` (see docs/grading.md)."""
    extracted = extract_answer(
        response, choices, mode=extraction, order=order, last_number_fallback=last_number_fallback
    )
    correct = extracted is not None and equivalent(
        gold, extracted, choices, timeout=timeout, precision=precision
    )
    return Graded(extracted, correct)


def record_choices(record: Mapping[str, Any]) -> list[str] | None:
    """The options of a benchmark record: ``choices`` (MathVista) or non-empty ``options`` (MathVision).

    A MathVista ``free_form`` question never has options, whatever its ``choices`` field holds.
    """
    if record.get("question_type") == "free_form":
        return None
    for key in ("choices", "options"):
        value = record.get(key)
        if value:
            return [str(v) for v in value]
    return None


def record_precision(record: Mapping[str, Any]) -> int | None:
    """MathVista's ``precision`` applies to ``answer_type == "float"`` answers (or when no type is given)."""
    precision = record.get("precision")
    if precision is None or record.get("answer_type") not in (None, "float"):
        return None
    return int(precision)


def grade_record(
    record: Mapping[str, Any], *, extraction: str = "lenient", timeout: float | None = None
) -> Graded:
    """Grade one ``{"response", "answer", [choices|options], [question_type], [answer_type], [precision]}``."""
    return grade(
        str(record["response"]),
        str(record["answer"]),
        choices=record_choices(record),
        precision=record_precision(record),
        extraction=extraction,
        timeout=timeout,
    )
