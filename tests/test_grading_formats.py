"""Grading that holds on every benchmark's own answer formats (issue #24): self-consistency on every shipped
record in both modes, the official exceptions, MathVerse official extraction, the lenient categories, a
sample of math-verify's own suite, and We-Math ``--limit``."""

from __future__ import annotations

import json

import pytest

from corl_vl.answers import equivalent, extract_answer, grade
from corl_vl.data.problem import Problem
from corl_vl.eval.loaders import load_benchmark
from corl_vl.eval.scoring import get_scorer, score_responses
from corl_vl.eval.scoring.consistency import check
from corl_vl.eval.scoring.mathverse import official_extract

SHIPPED = [
    ("mathverse", "eval/mathverse/testmini_text_only.json"),
    ("mathverse", "grading/mathverse_testmini_text_only.json"),
    ("wemath", "eval/we-math/testmini.json"),
    ("mathvista", "eval/mathvista/testmini.json"),
    ("mathvision", "eval/math-v/testmini.jsonl"),
    ("math500", "eval/math500/test.json"),
]


@pytest.mark.parametrize(("benchmark", "path"), SHIPPED)
def test_a_response_stating_the_gold_is_correct_in_both_modes(fixtures_dir, benchmark, path):
    problems = load_benchmark(benchmark, fixtures_dir / path, annotations_only=True)
    result = check(benchmark, problems)
    assert result.failures == [], result.failures[:3]
    assert result.rate("official") == result.rate("verified") == 1.0


def _official(benchmark: str, problem: Problem, response: str) -> bool:
    return bool(get_scorer(benchmark).score_record(problem, [response]).correct_official[0])


def test_official_exceptions_are_the_official_rules():
    # We-Math: the letter is the first character after the last "Answer" (case-sensitive), so a box is wrong
    wemath = Problem("1", "q", choices=["3", "4"], answer="B", meta={})
    assert _official("wemath", wemath, "<Answer>: B") and _official("wemath", wemath, "Answer: B. 4")
    assert not _official("wemath", wemath, "\\boxed{B}") and not _official(
        "wemath", wemath, "The answer is B."
    )
    # MATH-V compares its cleaned, lower-cased extraction with the raw option text
    mathvision = Problem("1", "q", choices=["$12 \\mathrm{~m}$", "Person C"], answer="B")
    assert not _official("mathvision", mathvision, "Person C") and _official("mathvision", mathvision, "B")
    # MathVista reads "(b)" as option letter B, even when "(b)" is an option's text
    mathvista = Problem(
        "1",
        "q",
        choices=["(c)", "(a)", "(b)"],
        answer="(b)",
        meta={"question_type": "multi_choice", "answer_type": "text"},
    )
    assert not _official("mathvista", mathvista, "(b)") and _official("mathvista", mathvista, "C")


@pytest.mark.parametrize(
    ("response", "gold", "extracted"),
    [
        ("The area is 229 cm.", "229", "229"),  # unit dropped
        ("The area is 229 cm.", "229 cm", "229"),  # ... so a gold written with its unit never matches
        ("\\( 22.3 \\) meters", "22.3", "22.3"),
        ("$299 \\mathrm{~cm}^{3}$", "$299 \\mathrm{~cm}^{3}$", "299"),  # never the 3 of cm^3
        ("Area $=7298.6737 \\mathrm{~mm}^{2}$", "7298.6737 \\mathrm{~mm}^{2}", "7298.6737"),
        ("I cannot determine the answer without the figure.", "5", None),  # a refusal is null
        ("So the relation is $f(x) = -x^2 - 2x + 1$.", "f(x) = -x^2 - 2x + 1", "f(x) = -x^2 - 2x + 1"),
        ("The line is $y = -2x + 5$.", "y = -2x + 5", "y = -2x + 5"),  # an equation, not a labelled value
        ("So $C=40.84 \\mathrm{~cm}$.", "$C=40.84 \\mathrm{~cm}$", "40.84"),
    ],
)
def test_mathverse_official_extraction_follows_the_official_prompt(response, gold, extracted):
    assert official_extract(response) == extracted
    problem = Problem("1", "q", answer=gold, meta={})
    # the judge's rule: the same value is consistent, the gold's unit dropped as the extraction drops it
    assert _official("mathverse", problem, response) is (extracted is not None)
    # --quick_match: the extraction must equal the answer as written (a gold with a unit never matches)
    quick = get_scorer("mathverse", scoring="quick-match").score_record(problem, [response])
    assert quick.correct_official == [extracted == gold.strip()] == quick.correct


def test_mathverse_official_names_the_option_letter_and_quick_matches():
    choices = ["40°", "60°", "They give the solutions to the equation $f(t)=g(t)$."]
    assert (
        official_extract("Therefore the answer is:\n\nC. They give the solutions to $f(t)=g(t)$.", choices)
        == "C"
    )
    text = "They give the solutions to the equation $f(t)=g(t)$"  # an option's text alone stays text
    assert official_extract(text + ".", choices) == text
    assert official_extract("D, because the two angles add up to 180°", ["1", "2", "3", "4"]) == "D"
    problem = Problem("1", "q", answer="4 ", meta={})  # the official script can never match " 4 "; we strip
    assert _official("mathverse", problem, "The answer is 4.")


@pytest.mark.parametrize(
    ("response", "gold", "choices", "correct"),
    [
        # We-Math's own prompt format and its variants
        ("Reasoning mentions (C) and 12.\n<Answer>:A", "A", ["1", "2", "3"], True),
        ("The correct answer is:\n<Answer>: C. 3000, 4000", "C", ["300", "400", "3000, 4000"], True),
        ("Final Answer: The correct option is C.", "C", ["1", "2", "3"], True),
        # an option's text is never its letter; a prose option is not mined for numbers
        ("A circle", "A", ["A circle", "A square"], True),
        ("A circle", "B", ["A square", "A circle"], True),
        ("Shape A is moved 2 units downward.", "2", ["2", "Shape A is moved 2 units downward."], False),
        # units: different units are different answers; a unit is not the value
        ("12a", "12h", ["12h", "12a"], False),
        ("5 m", "5 cm", None, False),
        ("113.1 square centimeters", "Area $=113.1 \\mathrm{~cm}^{2}$", None, True),  # a unit spelled out
        ("5 meters", "5 \\mathrm{~m}", None, True),
        ("5 \\text{ cm}", "5 \\mathrm{~cm}^{2}", None, False),
        ("$\\frac{1}{3} \\text{meters}$", "\\frac{1}{3}", None, True),
        ("Circumference $=50.27 \\mathrm{~cm}$", "50.27", None, True),
        # a number inside a word is not a number
        ("AZYUK2A", "2", None, False),
        # several boxes that together form the answer
        ("$\\boxed{(2, 2)} \\quad \\text{and} \\quad \\boxed{(6, 2)}$", "(2, 2), (6, 2)", None, True),
        ("\\boxed{1}, \\boxed{2}, \\boxed{3}", "\\{1,2,3\\}", None, True),
        ("$\\boxed{k = 45} \\quad \\text{and} \\quad \\boxed{n = 2}$", "k = 45, n = 2", None, True),
        ("first \\boxed{4}, then we check more and get \\boxed{5}", "5", None, True),
        # relations stated in prose are relations
        ("Therefore $x \\geq 5$ is the solution.", "x >= 5", None, True),
        ("Therefore $x \\geq 5$ is the solution.", "5", None, False),
        ("We find that $x \\neq 3$.", "x != 3", None, True),
        # a LaTeX expression as the answer; a decimal comma after a lone 0
        ("Answer \\( (9+1) \\)", "10", None, True),
        ("0.111", "0,111", None, True),
        ("The answer is 11,\\! 111,\\! 111,\\! 100.", "11111111100", None, True),  # \\! is LaTeX, not "!"
        ("1234", "1,234", None, True),
        # inline math never spans lines: no answer rather than a guess
        ("Answer $ \n 9 \n $", "9", None, False),
        # input too deep to parse gives no answer, never a fallback number
        ("\\boxed{" + "\\frac{1}{" * 60 + "2" + "}" * 60 + "}", "2", None, False),
        (
            "so \\boxed{" + "\\frac{1}{" * 300 + "2" + "}" * 300 + "}",
            "2",
            None,
            False,
        ),  # over 2,000 characters
        # a gold written as named equations states its right sides
        ("$\\boxed{4, 5}$", "AB=4,CD=5", None, True),
        ("$0$", "a + 3z = 0", None, False),
    ],
)
def test_lenient_categories(response, gold, choices, correct):
    assert grade(response, gold, choices=choices).correct is correct


def test_wemath_option_text_starting_with_an_article_is_not_letter_a():
    assert extract_answer("A circle", ["A square", "A circle"], mode="lenient") == "A circle"
    assert not equivalent("A", "A circle", ["A square", "A circle"])


def test_mathverify_suite_sample(fixtures_dir):
    """Cases of math-verify's own regression suite (a sample; benchmarks/grading/ runs all of them)."""
    rows = [json.loads(line) for line in (fixtures_dir / "grading" / "mathverify_cases.jsonl").open()]
    assert len(rows) >= 50
    wrong = []
    for row in rows:
        gold = extract_answer(row["gold"], order=["boxed"]) or row["gold"]
        if grade(row["pred"], gold).correct is not row["expected"]:
            wrong.append(row)
    assert wrong == []


def test_wemath_limit_takes_whole_groups(fixtures_dir):
    path = fixtures_dir / "eval" / "we-math" / "testmini.json"
    problems = load_benchmark("wemath", path, annotations_only=True, limit=1)
    assert {p.meta["group"] for p in problems} == {problems[0].meta["group"]}
    assert len(problems) == problems[0].meta["steps"] + 1  # every step and the composite problem
    responses = {p.id: [f"<Answer>: {p.answer}"] for p in problems}
    results, _ = score_responses("wemath", problems, responses)
    assert results["overall"] == 1.0
    four = results["breakdowns"]["four_dimensional"]["counts"]
    assert four["groups"] == 1 and four["incomplete_groups"] == 0


def test_wemath_without_a_complete_group_has_no_score(fixtures_dir):
    from corl_vl.eval.report import overall_text

    problems = load_benchmark(
        "wemath", fixtures_dir / "eval" / "we-math" / "testmini.json", annotations_only=True
    )
    one_each = [p for p in problems if p.meta["step"] == "1"]  # every group lacks its other members
    results, _ = score_responses("wemath", one_each, {p.id: [p.answer] for p in one_each})
    assert results["overall"] is None and overall_text(results) == "n/a (no complete group)"
