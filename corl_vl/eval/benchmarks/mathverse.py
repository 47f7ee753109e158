"""MathVerse (``AI4Math/MathVerse``, config ``testmini``; repository ``data/testmini.json``).

The options of a multiple-choice item are written into the question text ("Choices:\\nA:40°\\nB:60°"), so they
are parsed into ``meta["choices"]`` for scoring but not set as ``Problem.choices`` (the prompt would list them
twice). Vision-Only items have an empty question: the problem is in the image.
"""

from __future__ import annotations

import re
from typing import Any

from corl_vl.data.problem import Problem
from corl_vl.eval.benchmark_rows import RowContext, answer_text, as_text, record_images, require

_CHOICES_HEAD = re.compile(r"Choices?\s*:")
_CHOICE_LINE = re.compile(r"^\s*\(?([A-H])\)?\s*[:.：]\s*(.*?)\s*$")
VISION_ONLY_QUESTION = "Answer the question shown in the image."
TEXT_ONLY_VERSIONS = ("Text Only",)


def parse_choices(question: str) -> list[str] | None:
    """Option texts from the "Choices:" block of a MathVerse question, in letter order; None if absent."""
    heads = list(_CHOICES_HEAD.finditer(question))
    if not heads:
        return None
    block = question[heads[-1].end() :]
    choices: list[str] = []
    for line in block.splitlines():
        match = _CHOICE_LINE.match(line)
        if match and ord(match.group(1)) - ord("A") == len(choices):
            choices.append(match.group(2))
    return choices or None


def to_problem(row: dict[str, Any], ctx: RowContext) -> Problem:
    sid = as_text(require(row, "sample_index", ctx))
    version = str(require(row, "problem_version", ctx, sid))
    question = str(row.get("question") or "").strip() or VISION_ONLY_QUESTION
    answer = answer_text(require(row, "answer", ctx, sid), ctx, sid)
    question_type = str(require(row, "question_type", ctx, sid))
    metadata = row.get("metadata") or {}
    meta: dict[str, Any] = {
        "problem_index": as_text(row.get("problem_index", "")),
        "problem_version": version,
        "question_type": question_type,
        "subject": metadata.get("subject", "unknown"),
        "subfield": metadata.get("subfield", "unknown"),
    }
    if question_type.startswith("multi"):
        meta["choices"] = parse_choices(question)
    needs_image = version not in TEXT_ONLY_VERSIONS
    images = record_images(row, ("image",), ctx, sid, required=needs_image, subdirs=("images",))
    return Problem(id=sid, question=question, images=images, answer=answer, meta=meta)
