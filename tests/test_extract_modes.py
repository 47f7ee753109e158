"""Extraction modes: ``strict`` (peer votes, unchanged) and ``lenient`` (grading), and the math a grader is
expected to know."""

from __future__ import annotations

import inspect

import pytest

from corl_vl.answers import equivalent, extract_answer, grade, vote
from corl_vl.answers.extract import DEFAULT_ORDER
from corl_vl.errors import CorlError

ABCD = ["3", "4", "5", "6"]

# ---------------------------------------------------------------------------------------------- lenient
LENIENT = [
    ("The correct option is C.", ABCD, "C"),
    ("答案:B", ABCD, "B"),
    ("答案是 12", None, "12"),
    ("**(C)**", ABCD, "C"),
    ("Looking at the figure, therefore choice (B)", ABCD, "B"),
    ("**Answer:** D", ABCD, "D"),
    ("Die Antwort ist 2,5.", None, "2,5"),
    ("Réponse : 7", None, "7"),
    ("Ответ: 9", None, "9"),
    ("The final answer should be 42 apples.", None, "42 apples"),
    ("The answer to this question is $\\frac{3}{4}$.", None, "\\frac{3}{4}"),
    ("Therefore, the year in which the sales peaked is 2019.", None, "2019"),
    ("First 3 cats came, then 4 more. So there are 7 cats in total.", None, "7"),
    ("We add the parts 12 and 30 and then 5 more\nso it is about", None, "5"),  # the last number
    ("Then the area is $\\frac{3}{4}$ of the square", None, "\\frac{3}{4}"),
    ("So the share is $\\boxed{25\\%}$.", None, "25\\%"),
    ("the result of the computation is 1,234 dollars", None, "1,234"),
    ("So the answer is \\(\\frac{1}{2}\\).", None, "\\frac{1}{2}"),
    ("Looking at the bars again, I think it's C.", ABCD, "C"),
    ("So the number of cats is eight.", None, "8"),
    ("-5", None, "-5"),
]


@pytest.mark.parametrize(("response", "choices", "expected"), LENIENT)
def test_lenient_extraction_patterns(response: str, choices: list[str] | None, expected: str) -> None:
    assert extract_answer(response, choices, mode="lenient") == expected


def test_lenient_takes_nothing_from_a_refusal_or_a_hedge() -> None:
    refusal = (
        "The table is $4 \\times 4$ but the figure is missing. Please provide the figures for the problem."
    )
    assert extract_answer(refusal, mode="lenient") is None
    hedge = "So, the correct answers are (B) 13 and (C) 26."
    assert extract_answer(hedge, ["6.5", "13", "26", "52"], mode="lenient") is None
    assert extract_answer("A, b, c, d", ["1", "2", "3", "4"], mode="lenient") is None


@pytest.mark.parametrize(
    "text", ["(" * 50_000, "*" * 100_000, "answer is " * 10_000, "$" * 100_000, "1," * 50_000]
)
def test_lenient_survives_pathological_responses(text: str) -> None:
    found = extract_answer(text, ABCD, mode="lenient")  # returns (no exception, no hang); any answer is short
    assert found is None or len(found) <= 2000


def test_lenient_falls_back_to_math_verify_extraction() -> None:
    # no marker, no number: only math-verify's own LaTeX extraction finds the expression
    assert extract_answer("which simplifies nicely into $x + y$", mode="lenient") == "x + y"


# ---------------------------------------------------------------------------------------------- strict
STRICT_UNCHANGED = [
    "Adding them: \\boxed{12}.",
    "<answer>7</answer>",
    "Let me think. The final answer is $\\frac{1}{2}$.",
    "Between 3 and 5, so (B)",
    "B",
    "I think it is (C) 145°",
    "Answer: 4",
]


@pytest.mark.parametrize("response", STRICT_UNCHANGED)
def test_strict_extraction_is_the_marker_order(response: str) -> None:
    assert extract_answer(response, ABCD) == extract_answer(response, ABCD, order=DEFAULT_ORDER)


def test_strict_is_the_default_and_ignores_unmarked_prose() -> None:
    assert inspect.signature(extract_answer).parameters["mode"].default == "strict"
    prose = [
        r for r, _, _ in LENIENT if not r.startswith(("So the share", "So the answer", "**", "-5"))
    ]  # boxed, bold marker, bare
    for response in prose:
        assert extract_answer(response, ABCD if "option" in response or "答案:" in response else None) is None
    assert extract_answer("-5") == "-5"  # a completion that is nothing but an answer
    assert extract_answer("$\\frac{1}{2}$") == "\\frac{1}{2}" and extract_answer("x = 3") == "x = 3"
    assert extract_answer("12 cm") == "12 cm"
    assert extract_answer("a", ABCD) is None and extract_answer("hello there") is None
    with pytest.raises(CorlError, match="extraction mode"):
        extract_answer("1", mode="loose")


def test_peer_votes_are_unchanged() -> None:
    completions = [
        *STRICT_UNCHANGED,
        "I would guess the answer is probably something",
        "The correct option is C.",
    ]
    strict = [extract_answer(c, ABCD) for c in completions]
    before = [extract_answer(c, ABCD, order=DEFAULT_ORDER) for c in completions]
    assert strict == before
    assert vote(strict, choices=ABCD) == vote(before, choices=ABCD)


# ---------------------------------------------------------------------------------------------- math a user expects
MATH = [
    ("1000", "1,000", True),  # thousands separators
    ("1000", "1{,}000", True),
    ("1000", "1\\,000", True),
    ("2.5", "2,5", True),  # decimal comma
    ("2.5", "2,50", True),
    ("0.4", ".4", True),  # leading point
    ("50\\%", "50%", True),  # percent spellings
    ("50%", "50 percent", True),
    ("0.5", "50\\%", True),
    ("5", "5\\text{ cm}", True),  # units and \text{} wrappers
    ("5", "5 cm", True),
    ("5", "\\text{5}", True),
    ("12", "$12 \\mathrm{~m}$", True),
    ("\\frac{1}{3}", "\\dfrac{1}{3}", True),  # \dfrac / \tfrac / \frac13
    ("\\frac{1}{3}", "\\tfrac13", True),
    ("\\frac13", "1/3", True),
    ("x \\geq 5", "5 \\leq x", True),  # relations
    ("x \\ge 5", "x > 5", False),
    ("[1, 3)", "[1,3)", True),  # intervals and sets
    ("[1,3)", "(1,3)", False),
    ("\\{1, 2\\}", "\\{2, 1\\}", True),
    ("(1,2)", "(2,1)", False),
    ("k = 1/3", "1/3", True),  # k = 1/3 vs 1/3
    ("\\frac13", "k=\\frac{1}{3}", True),
    ("1/3", "0.33", False),
]


@pytest.mark.parametrize(("gold", "pred", "expected"), MATH)
def test_math_a_user_expects(gold: str, pred: str, expected: bool) -> None:
    assert equivalent(gold, pred) is expected


def test_grade_reads_a_bare_answer_and_free_prose() -> None:
    assert grade("-5", "-5").correct  # a bare answer, in both modes
    assert grade("-5", "-5", extraction="strict").correct
    assert grade("Therefore, the year in which it peaked is 2019.", "2019").correct
    assert not grade("Therefore, the year in which it peaked is 2019.", "2019", extraction="strict").correct


def test_a_graded_result_refuses_to_be_used_as_a_bool():
    """``if grade(...)`` would be true for every response (a dataclass is truthy); it must say so instead."""
    graded = grade("\\boxed{3}", "4")
    assert graded.correct is False
    with pytest.raises(TypeError, match=r"use \.correct"):
        bool(graded)
