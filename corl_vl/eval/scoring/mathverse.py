"""MathVerse scoring: per problem version (Text Dominant … Vision Only) and per subject / subfield.

The official pipeline extracts with GPT under a few-shot prompt (``evaluation/extract_answer_s1.py``, examples in
``evaluation/prompts.py``) and judges with GPT (``score_answer_s2.py``), whose only rule-based judge is
``--quick_match``: ``inst['answer'] == inst['extraction']``. ``official`` here:

- extraction (:func:`official_extract`, or a local model running the official prompt, ``--extractor
  model:…``) as the prompt's examples extract: a refusal is null, a named option is its letter ("D. They give
  …" → ``D``), ``$…$``/``\\(…\\)`` and a trailing unit are dropped ("22.3 meters" → ``22.3``), a relation
  such as ``f(x) = -x^2 - 2x + 1`` stays whole;
- quick match: the extraction equals the answer string. A gold written with delimiters, a label or a unit
  (``Area $=113.1 \\mathrm{~cm}^{2}$``) therefore never matches an extraction that drops them, as officially.

Deviation (docs/grading.md lists it with the official line): the answer is stripped of outer whitespace
before the match (officially only the extraction is, so such a gold could never match). ``verified``: the shared extractor and equivalence check (gold letter or gold option value for
multiple choice, mathematical equivalence otherwise).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from corl_vl.answers.extract import plain_text
from corl_vl.answers.lenient import declines
from corl_vl.answers.options import parse_options
from corl_vl.answers.units import split_unit, strip_assignment
from corl_vl.data.problem import Problem
from corl_vl.eval.scoring.base import Scorer

_DELIMITERS = re.compile(r"\\[()\[\]]|\$")


MAX_SHORT_LINES = 3
MAX_SHORT_CHARS = 100


def official_extract(response: str, choices: Sequence[str] | None = None) -> str | None:
    """The answer the official extraction prompt's examples would give (see the module docstring)."""
    from corl_vl.answers import extract_answer

    if declines(response[-4000:]):
        return None  # "I cannot provide the correct option letter …" → null
    found = extract_answer(response, choices, mode="lenient")
    if found is None:
        lines = [line.strip() for line in response.strip().splitlines() if line.strip()]
        if not lines or len(lines) > MAX_SHORT_LINES or len(response) > MAX_SHORT_CHARS:
            return None
        found = ", ".join(lines)  # a short answer without a marker ("Bugs Bunny", "C\nD") is copied
    if choices and any(plain_text(found) == plain_text(value) for value in parse_options(choices).values):
        return found.strip()  # an option's text is copied as it is (the prompt names a letter only if given)
    return written_value(found) or None


def written_value(text: str) -> str:
    """What the extraction prompt's examples keep of a stated answer: delimiters dropped ("\\( 22.3 \\)
    meters" → "22.3 meters"), then a label or one-letter assignment and a unit ("22.3")."""
    s = " ".join(_DELIMITERS.sub(" ", text).split())
    value, unit = split_unit(strip_assignment(s))
    return (value if unit is not None or value != s else s).strip()


@dataclass
class MathVerseScorer(Scorer):
    name: str = "mathverse"
    breakdown_keys: tuple[str, ...] = ("problem_version", "subject", "subfield", "question_type")

    def official_extract(self, problem: Problem, response: str) -> str | None:
        return official_extract(response, self.choices(problem))

    def official_judge(self, problem: Problem, extracted: str | None) -> bool:
        """``--quick_match``: the extraction equals the answer (both stripped of outer whitespace)."""
        if extracted is None or problem.answer is None:
            return False
        return extracted.strip() == problem.answer.strip()

    def groups(self, problem: Problem) -> dict[str, Any]:
        groups = super().groups(problem)
        groups["subfield"] = (
            f"{problem.meta.get('subject', 'unknown')} / {problem.meta.get('subfield', 'unknown')}"
        )
        return groups
