"""MathVerse scoring: per problem version (Text Dominant … Vision Only) and per subject / subfield.

The official pipeline extracts with GPT and judges with GPT (``score_answer_s2.py``; its ``--quick_match``
is exact string equality). Rule-based here: the shared extractor, then the shared equivalence check, which
accepts the gold letter or the gold option's value for multiple choice (options parsed from the question)
and mathematical equivalence for free-form answers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from corl_vl.data.problem import Problem
from corl_vl.eval.scoring.base import Scorer


@dataclass
class MathVerseScorer(Scorer):
    name: str = "mathverse"
    breakdown_keys: tuple[str, ...] = ("problem_version", "subject", "subfield", "question_type")

    def groups(self, problem: Problem) -> dict[str, Any]:
        groups = super().groups(problem)
        groups["subfield"] = (
            f"{problem.meta.get('subject', 'unknown')} / {problem.meta.get('subfield', 'unknown')}"
        )
        return groups
