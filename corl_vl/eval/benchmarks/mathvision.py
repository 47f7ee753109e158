"""MathVision / MATH-V (``MathLLMs/MathVision``; repository ``data/test.jsonl``, ``data/testmini.jsonl``)."""

from __future__ import annotations

from typing import Any

from corl_vl.data.problem import Problem
from corl_vl.eval.benchmark_rows import RowContext, answer_text, as_text, record_images, require


def to_problem(row: dict[str, Any], ctx: RowContext) -> Problem:
    rid = as_text(require(row, "id", ctx))
    question = str(require(row, "question", ctx, rid)).strip()
    answer = answer_text(require(row, "answer", ctx, rid), ctx, rid)
    options = [str(o) for o in (row.get("options") or [])]
    meta = {"level": as_text(row.get("level", "unknown")), "subject": str(row.get("subject", "unknown"))}
    images = record_images(row, ("decoded_image", "image"), ctx, rid)
    return Problem(
        id=rid, question=question, images=images, choices=options or None, answer=answer, meta=meta
    )
