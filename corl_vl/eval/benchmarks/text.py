"""Text benchmarks of the paper's LLM table: MATH-500, AMC, AIME, GPQA-Diamond, GSM8K.

Hub defaults (overridable with ``--data``): ``HuggingFaceH4/MATH-500`` (test), ``AI-MO/aimo-validation-amc``
(83 problems, scored avg@8), ``HuggingFaceH4/aime_2024`` (30), ``Idavidrein/gpqa`` config ``gpqa_diamond``
(198, gated), ``openai/gsm8k`` config ``main`` (test). Local copies may use either the hub's field names or
the Co-RL release's (``prompt``/``answer``/``id`` for MATH-500).
"""

from __future__ import annotations

import random
import re
from typing import Any

from corl_vl.data.problem import Problem
from corl_vl.eval.benchmark_rows import RowContext, answer_text, as_text, first_present, require

GPQA_SEED = 0  # GPQA's options are shuffled per record with this fixed seed (stable across runs and machines)
_MATH_SUBJECT = re.compile(r"^test/([^/]+)/")


def math500_problem(row: dict[str, Any], ctx: RowContext) -> Problem:
    rid = as_text(first_present(row, ("unique_id", "id"), ctx))
    question = str(first_present(row, ("problem", "prompt", "question"), ctx, rid)).strip()
    answer = answer_text(require(row, "answer", ctx, rid), ctx, rid)
    subject = row.get("subject")
    if subject is None:
        match = _MATH_SUBJECT.match(rid)  # release ids look like "test/precalculus/807.json"
        subject = match.group(1) if match else "unknown"
    meta = {"subject": str(subject), "level": as_text(row.get("level", "unknown"))}
    return Problem(id=rid, question=question, answer=answer, meta=meta)


def competition_problem(row: dict[str, Any], ctx: RowContext) -> Problem:
    """AMC and AIME rows: ``id``, ``problem``, ``answer`` (AMC stores answers as floats: 142.0 → "142")."""
    rid = as_text(first_present(row, ("id", "ID", "unique_id"), ctx))
    question = str(first_present(row, ("problem", "question", "prompt", "Problem"), ctx, rid)).strip()
    answer = answer_text(first_present(row, ("answer", "Answer"), ctx, rid), ctx, rid)
    meta = {"year": as_text(row["year"])} if row.get("year") is not None else {}
    return Problem(id=rid, question=question, answer=answer, meta=meta)


def shuffled_options(record_id: str, correct: str, incorrect: list[str]) -> tuple[list[str], str]:
    """GPQA options in a fixed per-record order and the gold letter.

    Seeded by ``GPQA_SEED`` and the record id (``random.Random`` hashes a str seed deterministically), so the
    order does not depend on which subset is loaded or in what order.
    """
    options = [correct, *incorrect]
    random.Random(f"{GPQA_SEED}/{record_id}").shuffle(options)
    return options, chr(ord("A") + options.index(correct))


def gpqa_problem(row: dict[str, Any], ctx: RowContext) -> Problem:
    rid = as_text(first_present(row, ("Record ID", "id"), ctx))
    question = str(require(row, "Question", ctx, rid)).strip()
    correct = str(require(row, "Correct Answer", ctx, rid)).strip()
    wrong = [str(require(row, f"Incorrect Answer {i}", ctx, rid)).strip() for i in (1, 2, 3)]
    options, letter = shuffled_options(rid, correct, wrong)
    meta = {"domain": str(row.get("High-level domain") or "unknown")}
    return Problem(id=rid, question=question, choices=options, answer=letter, meta=meta)


def gsm8k_answer(solution: str) -> str:
    """The final number after ``####`` in a GSM8K solution, without thousands separators."""
    return solution.rpartition("####")[2].strip().replace(",", "")


def gsm8k_problem(row: dict[str, Any], ctx: RowContext) -> Problem:
    rid = as_text(row["id"]) if row.get("id") is not None else f"test-{ctx.index}"
    question = str(require(row, "question", ctx, rid)).strip()
    raw = answer_text(require(row, "answer", ctx, rid), ctx, rid)
    answer = gsm8k_answer(raw) if "####" in raw else raw
    return Problem(id=rid, question=question, answer=answer)
