"""MathVision (MATH-V) scoring.

``official``: the published rule-based grader, re-implemented in :mod:`.mathvision_official` (its extraction
and its ``is_equal``: case-insensitive strings, tuples, numbers rounded to 2 decimals; gold letter or the gold
option's text). ``verified``: the shared extractor and equivalence check (gold letter or gold option value).
Breakdowns: level, subject, and subject × level.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from corl_vl.data.problem import Problem
from corl_vl.eval.scoring.base import Scorer
from corl_vl.eval.scoring.mathvision_official import official_correct, official_extract


@dataclass
class MathVisionScorer(Scorer):
    name: str = "mathvision"
    breakdown_keys: tuple[str, ...] = ("level", "subject", "subject_level")

    def official_extract(self, problem: Problem, response: str) -> str | None:
        return official_extract(response)

    def official_judge(self, problem: Problem, extracted: str | None) -> bool:
        if extracted is None or problem.answer is None:
            return False
        return official_correct(extracted, problem.answer, problem.choices)

    def judge(self, problem: Problem, extracted: str | None) -> bool:
        if extracted is None or problem.answer is None:
            return False
        golds = [problem.answer]
        choices = problem.choices or []
        index = ord(problem.answer[:1] or "?") - ord("A")
        if len(problem.answer) == 1 and 0 <= index < len(choices):
            golds.append(choices[index])  # the gold option's text counts too, as in the official script
        if any(extracted.strip().lower() == g.strip().lower() for g in golds):
            return True
        return super().judge(problem, extracted)

    def groups(self, problem: Problem) -> dict[str, Any]:
        level, subject = problem.meta.get("level", "unknown"), problem.meta.get("subject", "unknown")
        return {"level": f"level {level}", "subject": subject, "subject_level": f"{subject} / level {level}"}
