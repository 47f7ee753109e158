"""MathVerse scoring: per problem version (Text Dominant … Vision Only) and per subject / subfield.

The official pipeline extracts with GPT (few-shot prompt, ``extract_answer_s1.py``) and judges with GPT
(``score_answer_s2.py``), whose only rule-based judge is ``--quick_match``: the extraction must equal the
answer string exactly. ``official`` here: lenient extraction (or a local model running the official
extraction prompt, ``--extractor model:…``) and the quick-match rule. ``verified``: the shared extractor and
equivalence check (gold letter or gold option value for multiple choice, mathematical equivalence otherwise).
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

    def official_extract(self, problem: Problem, response: str) -> str | None:
        from corl_vl.answers import extract_answer

        return extract_answer(response, self.choices(problem), mode="lenient")

    def official_judge(self, problem: Problem, extracted: str | None) -> bool:
        """``--quick_match``: exact string equality with the answer."""
        return (
            extracted is not None
            and problem.answer is not None
            and extracted.strip() == problem.answer.strip()
        )

    def groups(self, problem: Problem) -> dict[str, Any]:
        groups = super().groups(problem)
        groups["subfield"] = (
            f"{problem.meta.get('subject', 'unknown')} / {problem.meta.get('subfield', 'unknown')}"
        )
        return groups
