"""MathVerse scoring: per problem version (Text Dominant … Vision Only) and per subject / subfield.

The official pipeline extracts with GPT under a few-shot prompt (``evaluation/extract_answer_s1.py``, examples in
``evaluation/prompts.py``) and judges with GPT (``score_answer_s2.py`` and the judge prompt
``demo_prompt_score``); ``--quick_match`` replaces the judge by ``inst['answer'] == inst['extraction']``.
``official`` here:

- extraction (:func:`official_extract`, or a local model running the official prompt, ``--extractor
  model:…``) as the prompt's examples extract: a refusal is null, a named option is its letter ("D. They give
  …" → ``D``), ``$…$``/``\\(…\\)`` and a trailing unit are dropped ("22.3 meters" → ``22.3``), a relation
  such as ``f(x) = -x^2 - 2x + 1`` stays whole, a multiple-select answer keeps all its letters;
- the judge's rule as rules (:mod:`corl_vl.eval.scoring.mathverse_judge`): consistent when the extraction
  means the same as the answer — the gold's label and unit dropped or converted, equivalent numbers,
  expressions, intervals and equations; for multiple choice only the gold letter or the gold option's text.

``scoring="quick-match"`` keeps the exact match instead (``--quick_match``; the answer is stripped of outer
whitespace first, officially only the extraction is). ``verified``: the shared extractor and equivalence check
(gold letter or gold option value for multiple choice, mathematical equivalence otherwise).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from corl_vl.answers import extract_answer
from corl_vl.answers.extract import GUESS_STEPS, MODE_ORDERS, plain_text
from corl_vl.answers.lenient import declines
from corl_vl.answers.options import parse_options
from corl_vl.answers.units import split_unit, strip_assignment
from corl_vl.data.problem import Problem
from corl_vl.eval.scoring.base import Scorer
from corl_vl.eval.scoring.mathverse_judge import consistent, letters, said_once

_DELIMITERS = re.compile(r"\\[()\[\]]|\$")
# the lenient steps that read an explicit answer (a box, a tag, "the answer is", a lone letter), before guesses
_MARKED = tuple(step for step in MODE_ORDERS["lenient"] if step not in GUESS_STEPS)


MAX_SHORT_LINES = 3
MAX_SHORT_CHARS = 300
_NUMBER = re.compile(r"\d+(?:\.\d+)?")
_STATES = re.compile(r"\b(?:is|are|was|were|equals?|gives?)\b", re.IGNORECASE)  # "The area is 12 cm"


def official_extract(response: str, choices: Sequence[str] | None = None) -> str | None:
    """The answer the official extraction prompt's examples would give (see the module docstring)."""
    if declines(response[-4000:]):
        return None  # "I cannot provide the correct option letter …" → null
    raw = extract_answer(response, None, mode="lenient")
    if choices and raw is not None and (chosen := letters(raw)) is not None:
        return ", ".join(chosen)  # a multiple-select answer ("C\nD") names every letter
    found = extract_answer(response, choices, mode="lenient", order=_MARKED)
    if found is None:
        guess = extract_answer(response, choices, mode="lenient")
        lines = [line.strip() for line in response.strip().splitlines() if line.strip()]
        short = bool(lines) and len(lines) <= MAX_SHORT_LINES and len(response) <= MAX_SHORT_CHARS
        # a short answer without a marker ("Bugs Bunny", "domain: [-4, 0) and range: (-3, 1]") is copied
        # whole, as the prompt's third example copies "Domain: …\nRange: …", unless it is a sentence that states
        # one value ("The area is 12 cm" → 12)
        states_one = _STATES.search(response) and len(_NUMBER.findall(response)) <= len(
            _NUMBER.findall(guess or "")
        )
        if short and (guess is None or not states_one):
            found = ", ".join(lines)
        else:
            found = guess
        if found is None:
            return None
    if choices and any(plain_text(found) == plain_text(value) for value in parse_options(choices).values):
        return found.strip()  # an option's text is copied as it is (the prompt names a letter only if given)
    return written_value(found) or None


def written_value(text: str) -> str:
    """What the extraction prompt's examples keep of a stated answer: delimiters dropped ("\\( 22.3 \\)
    meters" → "22.3 meters"), then a label or one-letter assignment and a unit ("22.3")."""
    s = " ".join(_DELIMITERS.sub(" ", said_once(text)).split())
    value, unit = split_unit(strip_assignment(s))
    return (value if unit is not None or value != s else s).strip()


@dataclass
class MathVerseScorer(Scorer):
    name: str = "mathverse"
    breakdown_keys: tuple[str, ...] = ("problem_version", "subject", "subfield", "question_type")

    def official_extract(self, problem: Problem, response: str) -> str | None:
        return official_extract(response, self.choices(problem))

    def official_judge(self, problem: Problem, extracted: str | None) -> bool:
        """The judge prompt's rule (:func:`~corl_vl.eval.scoring.mathverse_judge.consistent`); with
        ``scoring="quick-match"`` the extraction must equal the answer (both stripped of outer whitespace)."""
        if extracted is None or problem.answer is None:
            return False
        if self.scoring == "quick-match":
            return extracted.strip() == problem.answer.strip()
        return consistent(problem.answer, extracted, self.choices(problem))

    def groups(self, problem: Problem) -> dict[str, Any]:
        groups = super().groups(problem)
        groups["subfield"] = (
            f"{problem.meta.get('subject', 'unknown')} / {problem.meta.get('subfield', 'unknown')}"
        )
        return groups
