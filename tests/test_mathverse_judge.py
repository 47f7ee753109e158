"""MathVerse official scoring follows its judge prompt (issue #42): the prompt's five examples, its
consistency rule (units, equivalent forms, intervals, equations, the option's letter or text), and
``--scoring quick-match`` keeping the exact match."""

from __future__ import annotations

import argparse
import json

import pytest

from corl_vl.data.problem import Problem
from corl_vl.errors import CorlError
from corl_vl.eval.scoring import get_scorer, score_responses
from corl_vl.eval.scoring.mathverse_judge import consistent

CIRCLE = ["A:2", "B:2√{3}", "C:√{3}", "D:2√{2}"]  # the choices of the prompt's examples 2 and 4
ELLIPSE = ["\\frac{x^2}{81} + \\frac{y^2}{9} = 1", "Can not determine."]  # example 5


@pytest.mark.parametrize(
    ("gold", "extraction", "choices", "judgement"),
    [
        ("(-2,1]", "Extracted Answer: \\((-2, 1)\\)", None, False),  # 1: another interval
        ("C", "B:2√{3}", CIRCLE, False),  # 2: another option, by letter and text
        ("domain: [-4, 0) and range: (-3, 1]", "Range: \\((-4, 1]\\)", None, False),  # 3: part of it, wrong
        ("C", "null", CIRCLE, False),  # 4: no answer
        ("C", None, CIRCLE, False),
        ("A", "\\frac{x^2}{81} + \\frac{y^2}{9} = 1", ELLIPSE, True),  # 5: the gold option's text
    ],
)
def test_the_judge_prompts_five_examples(gold, extraction, choices, judgement):
    assert consistent(gold, extraction, choices) is judgement


@pytest.mark.parametrize(
    ("gold", "extraction", "judgement"),
    [
        ("0.5 m", "50 cm", True),  # the prompt's own example of the same meaning
        ("0.5 m", "5 cm", False),
        ("2 \\mathrm{~m}^{2}", "20000 \\mathrm{~cm}^{2}", True),
        ("3 h", "180 minutes", True),
        ("5 cm", "5 m", False),
        (
            "Area $=113.1 \\mathrm{~cm}^{2}$",
            "113.1",
            True,
        ),  # the extraction drops the unit, as its prompt does
        ("22.3 meters", "22.3", True),
        ("22.3 meters", "22.4", False),
        ("\\frac{1}{2}", "0.5", True),
        ("2\\sqrt{3}", "\\sqrt{12}", True),
        ("(-2,1]", "(-2, 1]", True),
        ("(-2,1]", "[-2, 1]", False),
        ("y=2x+1", "y = 1 + 2x", True),
        ("y=2x+1", "y = 2x - 1", False),
        ("35掳", "35", True),  # "°" mis-decoded in MathVerse's data
        ("-4.9\n-4.9", "-4.9", True),  # a gold written twice
    ],
)
def test_free_form_answers_are_consistent_when_they_mean_the_same(gold, extraction, judgement):
    assert consistent(gold, extraction, None) is judgement


def test_multiple_choice_takes_only_the_letter_or_the_options_text():
    assert consistent("C", "C", CIRCLE) and consistent("C", "√{3}", CIRCLE)
    assert not consistent("C", "D", CIRCLE) and not consistent("C", "2√{2}", CIRCLE)
    assert not consistent("C", "B, C", CIRCLE)  # a hedge names no single option
    assert consistent("C\nD", "C, D", CIRCLE) and consistent("C\nD", "D, C", CIRCLE)
    assert not consistent("C\nD", "C", CIRCLE) and not consistent("C\nD", "B, C, D", CIRCLE)


def _problem(index: int, answer: str, choices: list[str] | None = None) -> Problem:
    return Problem(str(index), "q", answer=answer, meta={"choices": choices} if choices else {})


def test_official_scoring_uses_the_judge_and_quick_match_keeps_the_exact_match():
    problems = [
        _problem(0, "Area $=113.1 \\mathrm{~cm}^{2}$"),
        _problem(1, "C\nD", CIRCLE),
        _problem(2, "0.5"),
    ]
    responses = {
        "0": ["So the area is \\boxed{113.1 \\text{ cm}^2}."],
        "1": ["\\boxed{C\nD}"],
        "2": ["\\boxed{\\frac{1}{2}}"],
    }
    official, records = score_responses("mathverse", problems, responses)
    assert official["overall"] == official["overall_official"] == 1.0 and official["scoring"] == "official"
    assert records["1"].extracted_official == ["C, D"]
    quick, records = score_responses("mathverse", problems, responses, scoring="quick-match")
    assert quick["overall"] == quick["overall_official"] == 0.0 and quick["scoring"] == "quick-match"
    assert quick["overall_verified"] == official["overall_verified"]
    assert [r.correct for r in records.values()] == [[False], [False], [False]]


def test_quick_match_is_refused_for_a_benchmark_without_a_judge(tmp_path):
    from corl_vl.cli.grade import check_quick_match
    from corl_vl.cli.grade import run as grade

    check_quick_match("quick-match", ["mathverse"])
    with pytest.raises(CorlError, match=r"--scoring quick-match.*mathvista"):
        check_quick_match("quick-match", ["mathverse", "mathvista"])
    data = tmp_path / "in.jsonl"
    data.write_text(json.dumps({"response": "The area is 229 cm.", "answer": "229 cm"}) + "\n")
    for scoring, correct in (("official", True), ("quick-match", False)):
        out = tmp_path / f"{scoring}.jsonl"
        args = argparse.Namespace(
            input=data,
            output=out,
            workers=1,
            timeout=None,
            extraction="lenient",
            scoring=scoring,
            benchmark="mathverse",
            no_progress=True,
        )
        assert grade(args) == 0
        assert json.loads(out.read_text())["correct"] is correct
    assert get_scorer("mathverse", scoring="quick-match").headline == "official"
