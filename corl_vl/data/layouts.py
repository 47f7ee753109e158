"""Column layouts of the public datasets Co-RL trains on, recognised by their columns.

A hub dataset rarely has the columns :class:`~corl_vl.data.datasets.FieldMap` expects by default: MMR1 has
no id and writes ``<image>`` into the question, multimodal-open-r1 wraps the answer in ``<answer>`` tags, MATH
keeps it inside the worked solution's last ``\\boxed{}``. A :class:`Layout` says which column is which and how
to get the short answer out, so such a source loads with no field map at all. Rows without an id column get
their row index in the source split (before any filtering), so ids stay stable when a recipe filters rows.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from corl_vl.answers.extract import extract_answer

# Placeholders some datasets write into the question; the adapters place the images themselves.
_IMAGE_PLACEHOLDER = re.compile(r"[ \t]*<image>[ \t]*\n?")


@dataclass(frozen=True)
class Layout:
    """How one known dataset stores a problem.

    Attributes:
        name: short name (documentation, messages).
        signature: columns whose presence identifies the layout.
        question: the question column.
        answer: the column holding the answer (possibly inside a longer text), or None.
        images: the image column (one image or a list), or None for text datasets.
        answer_step: extraction step that pulls the short answer out of ``answer`` (``boxed``,
            ``answer_tag``; see :func:`corl_vl.answers.extract.extract_answer`), or None to use it as is.
            A text where the step finds nothing has no answer (None): a worked solution, or its last sentence,
            is never taken as the answer (no grader would match it, and a GT reward would train on it).
    """

    name: str
    signature: frozenset[str]
    question: str
    answer: str | None
    images: str | None = None
    answer_step: str | None = None

    def normalize(self, rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        """Rows with the default columns ``id, question, answer, images``; other columns are kept (meta)."""
        return [self._row(i, row) for i, row in enumerate(rows)]

    def _row(self, index: int, row: dict[str, Any]) -> dict[str, Any]:
        out = dict(row)
        out.setdefault("id", str(index))
        question = out.pop(self.question)
        if isinstance(question, str) and self.images is not None:
            question = _IMAGE_PLACEHOLDER.sub(" ", question).strip()
        out["question"] = question
        if self.images is not None:
            out["images"] = out.pop(self.images)
        if self.answer is not None:
            raw = row.get(self.answer)
            text = "" if raw is None else str(raw)
            if self.answer_step:
                short = extract_answer(text, order=[self.answer_step])
                out["answer"] = short.strip() or None if short is not None else None
            else:
                out["answer"] = text.strip() or None
        return out


MMR1 = Layout("mmr1", frozenset({"images", "problem", "answer"}), "problem", "answer", images="images")
OPEN_R1 = Layout(
    "multimodal-open-r1",
    frozenset({"image", "problem", "solution", "original_question", "original_answer"}),
    "problem",
    "solution",
    images="image",
    answer_step="answer_tag",
)
MATH = Layout(
    "math", frozenset({"problem", "level", "type", "solution"}), "problem", "solution", answer_step="boxed"
)

# Most specific first: a source matching a longer signature is that dataset, not a generic one.
LAYOUTS: tuple[Layout, ...] = (OPEN_R1, MATH, MMR1)


def detect_layout(columns: Sequence[str]) -> Layout | None:
    """The known layout whose signature columns are all present, or None."""
    present = set(columns)
    return next((layout for layout in LAYOUTS if layout.signature <= present), None)
