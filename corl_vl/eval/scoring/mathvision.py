"""MathVision (MATH-V) scoring, rule-based like the official ``evaluation/evaluate.py``.

Official rules: extract (option-letter heuristics, last ``\\boxed{}``, "the answer is", value after the last
"="), then correct if ``is_equal(gold, answer)`` or ``is_equal(gold option's value, answer)``, where
``is_equal`` is case-insensitive string equality or numeric equality after rounding both to 2 decimals.
Here: the shared extractor and equivalence check (gold letter or gold option value), plus the 2-decimal
numeric comparison. Breakdowns: level, subject, and subject × level.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from corl_vl.data.problem import Problem
from corl_vl.eval.scoring.base import Scorer

_PLAIN_NUMBER = re.compile(r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)")


def _number(text: str) -> float | None:
    s = text.strip().strip("$").replace(",", "").rpartition("=")[2].strip()
    return float(s) if _PLAIN_NUMBER.fullmatch(s) else None


def equal_to_two_decimals(gold: str, pred: str) -> bool:
    """The official numeric rule: both plain numbers and equal after rounding to 2 decimals."""
    g, p = _number(gold), _number(pred)
    return g is not None and p is not None and round(g, 2) == round(p, 2)


@dataclass
class MathVisionScorer(Scorer):
    name: str = "mathvision"
    breakdown_keys: tuple[str, ...] = ("level", "subject", "subject_level")

    def judge(self, problem: Problem, extracted: str | None) -> bool:
        if extracted is None or problem.answer is None:
            return False
        golds = [problem.answer]
        choices = problem.choices or []
        index = ord(problem.answer[:1] or "?") - ord("A")
        if len(problem.answer) == 1 and 0 <= index < len(choices):
            golds.append(choices[index])  # the official script also accepts the gold option's value
        if any(extracted.strip().lower() == g.strip().lower() for g in golds):
            return True
        if super().judge(problem, extracted):
            return True
        return any(equal_to_two_decimals(g, extracted) for g in golds)

    def groups(self, problem: Problem) -> dict[str, Any]:
        level, subject = problem.meta.get("level", "unknown"), problem.meta.get("subject", "unknown")
        return {"level": f"level {level}", "subject": subject, "subject_level": f"{subject} / level {level}"}
