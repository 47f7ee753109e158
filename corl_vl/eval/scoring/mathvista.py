"""MathVista scoring: ``official`` as ``calculate_score.py`` does it (after a rule-based or model extraction),
``verified`` by mathematical equivalence.

Official rules (lupantech/MathVista ``evaluation/calculate_score.py``): multiple choice — "(B)" or "B" becomes
that option's text, anything else the option closest by Levenshtein distance (an empty extraction: the
shortest option; "(b)" is letter B even among options "(c)", "(a)", …, as the official regex reads it);
integer — ``str(int(float(x)))``; float — ``str(round(float(x), precision))``; list — ``str(list)``; then
exact string equality with the answer. The official extraction is a GPT call; :func:`rules_extract` stands in
for it (or ``--extractor model:…``). Reading the number out of an extraction ("1,000", "12 cm", "x = 3") is
part of that stand-in: GPT returns the bare number.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from corl_vl.answers import equivalent, extract_answer
from corl_vl.answers.extract import strip_dollars
from corl_vl.answers.lenient import MAX_SENTENCE_CHARS
from corl_vl.answers.normalize import parse_number
from corl_vl.data.problem import Problem
from corl_vl.eval.benchmarks.mathvista import METADATA_KEYS
from corl_vl.eval.scoring.base import Scorer

_PAREN_LETTER = re.compile(r"\(([a-zA-Z])\)")
_TEXT_WRAP = re.compile(r"\\(?:text|textbf|mathrm|mbox)\s*\{([^{}]*)\}")
_DEGREE = re.compile(r"\^\s*\{?\s*\\circ\s*\}?|\\degree")
_NUMBER = re.compile(r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?")
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
_QUOTED_HEAD = 'The answer is "'  # the official quick-extract pattern is r'The answer is "(.*)"\.'
_FIRST_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n")


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
    s = strip_dollars(text)
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
    number = parse_number(s)  # \\frac{1}{2}, 3/4: what the GPT extractor would write as 0.5, 0.75
    return float(number.value) if number is not None else None


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
    if question_type == "multi_choice" and choices:
        s = _clean(extraction or "")  # nothing extracted: the option closest to "" (the shortest)
        letters = _PAREN_LETTER.findall(s)
        if letters:
            s = letters[0].upper()
        options = [chr(ord("A") + i) for i in range(len(choices))]
        if s in options:
            return choices[options.index(s)]
        return most_similar(s, choices)
    if extraction is None or not extraction.strip():
        return None
    if answer_type == "integer":
        value = _to_float(extraction)
        return str(int(value)) if value is not None else None
    if answer_type == "float":
        value = _to_float(extraction)
        return str(round(value, precision if precision is not None else 0)) if value is not None else None
    if answer_type == "list":
        return _to_list(extraction)
    return _clean(extraction)


def official_shortcut(
    response: str, choices: Sequence[str] | None, question_type: str, answer_type: str
) -> str | None:
    """What ``extract_answer.py`` answers without asking its extractor model: an empty response, a response
    that is an option's text, or that reads as the integer / float asked for, or ``The answer is "…".``;
    None when the extractor has to read the response."""
    if response == "":
        return ""
    if question_type == "multi_choice" and choices and response in choices:
        return response
    for kind, read in (("integer", int), ("float", float)):
        if answer_type == kind:
            try:
                return str(read(response))  # int()/float() parse; nothing is executed
            except ValueError:
                pass
    return _quoted_answer(response)


def _quoted_answer(response: str) -> str | None:
    """``re.search(r'The answer is "(.*)"\\.', response)`` in linear time: the first line holding the phrase,
    up to that line's last ``".`` (what the greedy ``.*`` ends on); the regex itself is quadratic on a line
    that repeats the phrase."""
    for line in response.split("\n"):
        k = line.find(_QUOTED_HEAD)
        if k == -1:
            continue
        end = line.rfind('".')
        if end >= k + len(_QUOTED_HEAD):
            return line[k + len(_QUOTED_HEAD) : end]
    return None


def rules_extract(response: str, choices: Sequence[str] | None, question_type: str, answer_type: str) -> str:
    """A rule-based stand-in for the official GPT extraction (``extract_answer.py``).

    The official script's own shortcuts first (:func:`official_shortcut`), then lenient extraction. When that
    finds nothing in a multiple-choice response, the first sentence is returned, because that is what the GPT
    extractor usually copies from a refusal ("The question does not provide …"), and the closest option to it
    is then scored, as officially.
    """
    shortcut = official_shortcut(response, choices, question_type, answer_type)
    if shortcut is not None:
        return shortcut
    text = response.strip()
    if not text:
        return ""
    found = extract_answer(response, choices if question_type == "multi_choice" else None, mode="lenient")
    if found is not None:
        return found
    if question_type == "multi_choice":  # a sentence GPT would copy is short; the bound keeps matching linear
        return _FIRST_SENTENCE.split(text[:MAX_SENTENCE_CHARS], maxsplit=1)[0]
    return ""


@dataclass
class MathVistaScorer(Scorer):
    name: str = "mathvista"
    breakdown_keys: tuple[str, ...] = ("question_type", "answer_type", *METADATA_KEYS)

    def choices(self, problem: Problem) -> list[str] | None:
        return problem.choices if problem.meta.get("question_type") == "multi_choice" else None

    def normalize(self, problem: Problem, extracted: str | None) -> str | None:
        meta = problem.meta
        return normalize_extracted(
            extracted,
            problem.choices,
            meta.get("question_type", "free_form"),
            meta.get("answer_type", "text"),
            meta.get("precision"),
        )

    def official_extract(self, problem: Problem, response: str) -> str | None:
        meta = problem.meta
        return rules_extract(
            response, problem.choices, meta.get("question_type", "free_form"), meta.get("answer_type", "text")
        )

    def official_judge(self, problem: Problem, extracted: str | None) -> bool:
        """``calculate_score.py``: the normalised extraction must equal the answer string exactly."""
        prediction = self.normalize(problem, extracted)
        return prediction is not None and problem.answer is not None and prediction == problem.answer

    def judge(self, problem: Problem, extracted: str | None) -> bool:
        """Verified: mathematical equivalence (option letter or text; floats at the answer's precision)."""
        if extracted is None or problem.answer is None:
            return False
        precision = problem.meta.get("precision") if problem.meta.get("answer_type") == "float" else None
        return equivalent(problem.answer, extracted, self.choices(problem), precision=precision)
