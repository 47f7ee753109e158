"""MathVista scoring as the official ``calculate_score.py`` does it, after a rule-based extraction.

Official rules (lupantech/MathVista ``evaluation/calculate_score.py``): multiple choice — "(B)" or "B" becomes
that option's text, anything else the option closest by Levenshtein distance; integer — ``str(int(float(x)))``;
float — ``str(round(float(x), precision))``; list — ``str(list)``; then exact string equality with the answer.
The official extraction is a GPT call; here the shared rule-based extractor (``\\boxed{}`` first) replaces it.
Two deliberate differences: an empty extraction is wrong instead of being mapped to the closest (shortest)
option, as in the official script's later ``ignore_empty_extractions`` mode; and an extraction that *is* one
of the option texts is that option (the official regex turns "(b)" into letter B even when the options are
"(c)", "(a)", "(e)", "(d)", "(b)", as in pids 168 and 849).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from corl_vl.data.problem import Problem
from corl_vl.eval.benchmarks.mathvista import METADATA_KEYS
from corl_vl.eval.scoring.base import Scorer

_PAREN_LETTER = re.compile(r"\(([a-zA-Z])\)")
_TEXT_WRAP = re.compile(r"\\(?:text|textbf|mathrm|mbox)\s*\{([^{}]*)\}")
_DEGREE = re.compile(r"\^\s*\{?\s*\\circ\s*\}?|\\degree")
_NUMBER = re.compile(r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?")
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")


def edit_distance(a: str, b: str) -> int:
    """Levenshtein distance (insertions, deletions, substitutions), O(len(a)·len(b)) time, O(len(b)) memory."""
    if len(a) < len(b):
        a, b = b, a
    previous = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        current = [i]
        for j, cb in enumerate(b, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (ca != cb)))
        previous = current
    return previous[-1]


def most_similar(prediction: str, choices: Sequence[str]) -> str:
    """The choice with the smallest edit distance to ``prediction`` (first one on ties, as official)."""
    distances = [edit_distance(prediction, c) for c in choices]
    return choices[distances.index(min(distances))]


def _clean(text: str) -> str:
    s = text.strip()
    while len(s) >= 2 and s[0] == "$" and s[-1] == "$":
        s = s[1:-1].strip()
    s = _TEXT_WRAP.sub(r"\1", s)
    s = _DEGREE.sub("°", s)
    return s.strip().rstrip(".").strip()


def _to_float(text: str) -> float | None:
    """The number an extraction states: "1,000", "1000 g", "x = 12.5", "$3.9$" → float; None otherwise."""
    s = _THOUSANDS.sub("", _clean(text)).replace("\\%", "").replace("%", "")
    s = s.rpartition("=")[2].strip().lstrip("$").strip()
    try:
        return float(s)
    except ValueError:
        pass
    match = _NUMBER.match(s)  # a number followed by a unit word
    if match and (match.end() == len(s) or s[match.end()].isspace()):
        return float(match.group(0))
    return None


def _to_list(text: str) -> str | None:
    """``str(list)`` of the numbers in "[2014, 2016]", "(2014, 2016)" or "2014, 2016"."""
    s = _THOUSANDS.sub("", _clean(text))
    items = [x.strip() for x in s.strip("[]() ").split(",")]
    values: list[int | float] = []
    for item in items:
        if not _NUMBER.fullmatch(item):
            return None
        number = float(item)
        values.append(int(number) if re.fullmatch(r"[-+]?\d+", item) else number)
    return str(values) if values else None


def normalize_extracted(
    extraction: str | None,
    choices: Sequence[str] | None,
    question_type: str,
    answer_type: str,
    precision: int | None,
) -> str | None:
    """The official normalisation of one extracted answer (None: nothing comparable was extracted)."""
    if extraction is None or not extraction.strip():
        return None
    if question_type == "multi_choice" and choices:
        s = _clean(extraction)
        if s in choices:  # options that look like letters: "(b)" among ["(c)", "(a)", "(e)", "(d)", "(b)"]
            return s
        letters = _PAREN_LETTER.findall(s)
        if letters:
            s = letters[0].upper()
        options = [chr(ord("A") + i) for i in range(len(choices))]
        if s in options:
            return choices[options.index(s)]
        return most_similar(s, choices)
    if answer_type == "integer":
        value = _to_float(extraction)
        return str(int(value)) if value is not None else None
    if answer_type == "float":
        value = _to_float(extraction)
        return str(round(value, precision if precision is not None else 0)) if value is not None else None
    if answer_type == "list":
        return _to_list(extraction)
    return _clean(extraction)


@dataclass
class MathVistaScorer(Scorer):
    name: str = "mathvista"
    breakdown_keys: tuple[str, ...] = ("question_type", "answer_type", *METADATA_KEYS)

    def normalize(self, problem: Problem, extracted: str | None) -> str | None:
        meta = problem.meta
        return normalize_extracted(
            extracted, problem.choices, meta.get("question_type", "free_form"), meta.get("answer_type", "text"),
            meta.get("precision"),
        )  # fmt: skip

    def judge(self, problem: Problem, extracted: str | None) -> bool:
        prediction = self.normalize(problem, extracted)
        if prediction is None or problem.answer is None:
            return False
        gold = problem.answer.strip()
        if prediction == gold:
            return True
        if problem.meta.get("question_type") != "multi_choice":  # e.g. a gold "1.20" under precision 2
            return prediction == self.normalize(problem, gold)
        return False
