"""Benchmark scorers on real fixture records; every expected number is counted by hand in the comments."""

from __future__ import annotations

import pytest

from corl_vl.eval.loaders import load_benchmark
from corl_vl.eval.scoring import get_scorer, score_responses
from corl_vl.eval.scoring.mathvista import edit_distance, most_similar, normalize_extracted


def _load(fixtures_dir, name, sub):
    return load_benchmark(name, fixtures_dir / "eval" / sub, annotations_only=True)


def _entry(results, key, value):
    e = results["breakdowns"][key][value]
    return e["correct"], e["total"]


# ---------------------------------------------------------------------------------------------- MathVista
def test_mathvista_normalisation_follows_official_rules():
    choices = ["135°", "140°", "145°", "150°"]
    assert normalize_extracted("C", choices, "multi_choice", "text", None) == "145°"
    assert normalize_extracted("(B) 140", choices, "multi_choice", "text", None) == "140°"
    assert normalize_extracted("145^\\circ", choices, "multi_choice", "text", None) == "145°"
    assert (
        normalize_extracted("146", choices, "multi_choice", "text", None) == "140°"
    )  # edit distance, first tie
    assert normalize_extracted("", choices, "multi_choice", "text", None) == "135°"  # closest to "": shortest
    letters = ["(c)", "(a)", "(e)", "(d)", "(b)"]  # pid 168: the official regex reads "(b)" as letter B
    assert normalize_extracted("(b)", letters, "multi_choice", "text", None) == "(a)"
    assert normalize_extracted("B", letters, "multi_choice", "text", None) == "(a)"
    assert normalize_extracted("1,000 g", None, "free_form", "integer", None) == "1000"
    assert normalize_extracted("4.9", None, "free_form", "integer", None) == "4"  # int(float(x)) truncates
    assert normalize_extracted("x = 51.046", None, "free_form", "float", 2) == "51.05"
    assert normalize_extracted("1.25", None, "free_form", "float", 1) == "1.2"  # Python's round: half to even
    assert normalize_extracted("(2014, 2016)", None, "free_form", "list", None) == "[2014, 2016]"
    assert normalize_extracted("[1.5, 2]", None, "free_form", "list", None) == "[1.5, 2]"
    assert normalize_extracted("two thousand", None, "free_form", "integer", None) is None
    assert edit_distance("kitten", "sitting") == 3
    assert most_similar("quarter pas", ["half", "quarter", "quarter past"]) == "quarter past"


MATHVISTA_RESPONSES = {
    "1": ["so $d$ is \\boxed{1.20} m"],  # float p=1, gold 1.2: round(1.20, 1) = 1.2 → right
    "2": ["\\boxed{1,000}"],  # integer 1000 → right
    "3": ["\\boxed{C}"],  # multiple choice: C → "145°" → right
    "4": ["The answer is 4.5"],  # integer 4: official int(float("4.5")) = 4 → right
    "5": ["\\boxed{102}"],  # choice "102", gold "97" → wrong
    "7": ["\\boxed{quarter past}"],  # closest choice "quarter past", gold "quarter" → wrong
    "8": ["\\boxed{(A) Yes}"],  # letter A → "Yes" → right
    "108": ["\\boxed{51.042}"],  # float p=2: 51.04 → right
    "225": ["\\boxed{[0,2,0,2,1,7,1,2,0,3,0,6]}"],  # list → right
    "506": ["\\boxed{[2016, 2014]}"],  # list in the wrong order → wrong
    # "11": no response → wrong, reported missing
}


def test_mathvista_scores_and_breakdowns(fixtures_dir):
    problems = _load(fixtures_dir, "mathvista", "mathvista")
    results, records = score_responses("mathvista", problems, MATHVISTA_RESPONSES)
    # official: right 1, 2, 3, 4, 8, 108, 225 → 7 of 11; verified: 4 ("4.5" for 4) is wrong, the official
    # integer rule truncates it
    assert results["benchmark"] == "mathvista" and results["overall_verified"] == pytest.approx(6 / 11)
    assert results["overall"] == pytest.approx(7 / 11)
    assert results["n_correct"] == 7 and results["n_records"] == 11
    assert results["n_missing"] == 1 and results["missing_ids"] == ["11"]
    assert [records[i].correct for i in ("4", "5", "506", "11")] == [[True], [False], [False], []]
    assert _entry(results, "question_type", "multi_choice") == (2, 4)  # 3, 8 of 3, 5, 7, 8
    assert _entry(results, "question_type", "free_form") == (5, 7)  # 1, 2, 4, 108, 225 of 7
    assert _entry(results, "answer_type", "float") == (2, 2)
    assert _entry(results, "answer_type", "integer") == (2, 3)  # 2, 4 of 2, 4, 11
    assert _entry(results, "answer_type", "list") == (1, 2)
    assert _entry(results, "grade", "elementary school") == (1, 3)  # 4 of 4, 7, 11
    assert _entry(results, "skills", "arithmetic reasoning") == (4, 5)  # 2, 4, 8, 108 of +11
    assert _entry(results, "skills", "geometry reasoning") == (2, 3)  # 3, 4 of 3, 4, 5
    assert _entry(results, "category", "general-vqa") == (3, 4)  # 2, 8, 108 of +506
    assert results["breakdowns"]["answer_type"]["list"]["accuracy"] == 0.5
    assert set(results["breakdowns"]) == {
        "question_type",
        "answer_type",
        "language",
        "source",
        "category",
        "task",
        "context",
        "grade",
        "skills",
    }


# ---------------------------------------------------------------------------------------------- MathVerse
MATHVERSE_RESPONSES = {
    "1": ["\\boxed{140°}"],  # the value of gold option D → right
    "26": ["\\boxed{C}"],  # right
    "126": ["\\boxed{B}"],  # gold A → wrong
    "226": ["\\boxed{12\\sqrt{3}}"],  # value of C, "12 \\sqrt { 3 }" → right
    "351": ["\\boxed{4.4 m}"],  # gold "4.4 m" → right
    "376": ["\\boxed{4\\sqrt{3}}"],  # right
    # "474": missing → wrong
    "479": ["The answer is A."],  # right
    "504": ["I am not sure."],  # no answer → wrong
    "635": ["\\boxed{diameter $=10 \\mathrm{~m}$}"],  # right
}


def test_mathverse_scores_by_version_and_subject(fixtures_dir):
    problems = _load(fixtures_dir, "mathverse", "mathverse")
    assert problems[0].meta["choices"] == ["40°", "60°", "120°", "140°"]
    assert problems[0].choices is None  # the options are already in the question text
    results, _ = score_responses("mathverse", problems, MATHVERSE_RESPONSES, scoring="verified")
    assert results["overall"] == pytest.approx(0.7)  # 7 of 10
    assert _entry(results, "problem_version", "Text Only") == (7, 10)
    assert _entry(results, "subject", "Plane Geometry") == (5, 6)  # all but 126
    assert _entry(results, "subject", "Functions") == (1, 3)  # 479 of 474, 479, 504
    assert _entry(results, "subject", "Solid Geometry") == (1, 1)
    assert _entry(results, "question_type", "multi-choice") == (4, 5)
    assert _entry(results, "subfield", "Functions / Property") == (1, 2)  # 479 of 479, 504
    assert results["missing_ids"] == ["474"]


# ---------------------------------------------------------------------------------------------- MathVision
MATHVISION_RESPONSES = {
    "4": ["\\boxed{6}"],  # right
    "5": ["\\boxed{61.0}"],  # right (numeric)
    "6": ["\\boxed{D}"],  # right
    "8": ["\\boxed{3}"],  # gold 2 → wrong
    "16": ["The answer is 11."],  # right
    "27": ["\\boxed{A}"],  # right
    "38": ["\\boxed{94.996}"],  # gold 95: equal after rounding to 2 decimals (official rule) → right
    "39": ["\\boxed{red}"],  # the value of gold option A → right
    "55": ["\\boxed{KNGO}"],  # the value of option B, gold A → wrong
    # "64": missing → wrong
    "90": ["\\boxed{5-2-3-1-4}"],  # value of gold option E → right
    "91": ["\\boxed{12}"],  # gold E = "$12 \\mathrm{~m}$" → right
    "104": ["\\boxed{2}"],  # right
    "115": ["\\boxed{B}"],  # gold 3, no options → wrong
}


def test_mathvision_scores_by_level_and_subject(fixtures_dir):
    problems = _load(fixtures_dir, "mathvision", "math-v")
    results, records = score_responses("mathvision", problems, MATHVISION_RESPONSES)
    assert results["overall"] == pytest.approx(9 / 14) and results["overall_verified"] == pytest.approx(
        9 / 14
    )
    # official accepts 94.996 for 95 (2-decimal rounding) and rejects "12" for "$12 \\mathrm{~m}$" (it cannot
    # read the unit); verified says the opposite of both
    assert results["n_disagree"] == 2 and results["disagree_ids"] == ["38", "91"]
    assert records["38"].correct == [True] and records["55"].correct == [False]
    assert records["91"].correct_official == [False] and records["91"].correct_verified == [True]
    assert _entry(results, "level", "level 1") == (2, 4)  # 4, 104 of 4, 55, 91, 104
    assert _entry(results, "level", "level 2") == (4, 6)  # 5, 16, 38, 90 of 5, 8, 16, 38, 64, 90
    assert _entry(results, "level", "level 3") == (2, 3)  # 6, 39 of 6, 39, 115
    assert _entry(results, "level", "level 5") == (1, 1)
    assert _entry(results, "subject", "arithmetic") == (3, 5)  # 5, 16, 38 of 5, 8, 16, 38, 64
    assert _entry(results, "subject", "logic") == (2, 3)
    assert _entry(results, "subject", "combinatorics") == (0, 1)
    assert _entry(results, "subject_level", "arithmetic / level 2") == (3, 5)


def test_mathvision_accepts_the_gold_options_value_like_the_official_script():
    from corl_vl.data.problem import Problem

    # real record 742: options A, B, C, E, "Impossible to determine"; gold D, whose value is "E"
    problem = Problem("742", "?", choices=["A", "B", "C", "E", "Impossible to determine"], answer="D")
    record = get_scorer("mathvision").score_record(problem, ["\\boxed{D}", "\\boxed{E}", "\\boxed{C}"])
    assert record.correct_official == [True, True, False] and record.correct_verified == [True, True, False]


# ---------------------------------------------------------------------------------------------- text
MATH500_RESPONSES = {
    "test/precalculus/807.json": ["\\boxed{(3, \\frac{\\pi}{2})}"],  # right
    "test/intermediate_algebra/1994.json": ["\\boxed{p-q}"],  # right
    "test/algebra/2584.json": ["\\boxed{\\dfrac{14}{3}}"],  # right
    "test/number_theory/572.json": ["\\boxed{9}"],  # right
    "test/algebra/1349.json": ["\\boxed{Evelyn}"],  # gold \\text{Evelyn} → right
    "test/prealgebra/1622.json": ["\\boxed{24}"],  # gold 42 → wrong
    # "test/number_theory/515.json": missing → wrong
    "test/precalculus/927.json": ["\\boxed{90}"],  # gold 90^\\circ → right
}


def test_math500_scores_by_subject(fixtures_dir):
    problems = _load(fixtures_dir, "math500", "math500")
    results, _ = score_responses("math500", problems, MATH500_RESPONSES)
    assert results["overall"] == pytest.approx(6 / 8)
    assert _entry(results, "subject", "number_theory") == (1, 2)
    assert _entry(results, "subject", "prealgebra") == (0, 1)
    assert _entry(results, "subject", "precalculus") == (2, 2)
    assert "level" not in results["breakdowns"]  # the release's file carries no level


def test_avg_at_k_is_the_mean_over_each_records_responses(fixtures_dir):
    problems = _load(fixtures_dir, "math500", "math500")[3:6]  # golds 9, \text{Evelyn}, 42
    responses = {
        "test/number_theory/572.json": ["\\boxed{9}", "\\boxed{8}", "\\boxed{9}", "none"],  # 2/4
        "test/algebra/1349.json": ["\\boxed{Evelyn}"] * 4,  # 4/4
        "test/prealgebra/1622.json": ["\\boxed{42}", "\\boxed{41}", "\\boxed{40}", "\\boxed{39}"],  # 1/4
    }
    results, records = score_responses("amc", problems, responses)
    assert records["test/number_theory/572.json"].score == 0.5
    assert results["overall"] == pytest.approx((0.5 + 1.0 + 0.25) / 3)
    assert results["n_correct"] == 1.75 and results["responses_per_record"] == 4
    assert records["test/number_theory/572.json"].to_json()["correct"] == [True, False, True, False]


def test_gpqa_accepts_the_letter_or_the_option_text():
    from corl_vl.data.problem import Problem

    problem = Problem("rec1", "Which?", choices=["red", "blue", "green", "cyan"], answer="C")
    scorer = get_scorer("gpqa")
    assert scorer.score_record(problem, ["\\boxed{C}", "\\boxed{green}", "\\boxed{A}"]).correct == [
        True,
        True,
        False,
    ]


def test_gsm8k_compares_numbers():
    from corl_vl.data.problem import Problem

    problem = Problem("test-0", "How many?", answer="1234")
    scorer = get_scorer("gsm8k")
    assert scorer.score_record(problem, ["\\boxed{1,234}", "\\boxed{1234.0}", "\\boxed{1243}"]).correct == [
        True,
        True,
        False,
    ]
