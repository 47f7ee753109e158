"""We-Math: option parsing, the four-dimensional metrics on crafted patterns, and real fixture groups."""

from __future__ import annotations

import pytest

from corl_vl.eval.benchmarks.wemath import parse_options
from corl_vl.eval.loaders import load_benchmark
from corl_vl.eval.scoring import score_responses
from corl_vl.eval.scoring.wemath import Group, classify, four_dimensional, official_letter


def test_parse_options_handles_the_real_irregular_spellings():
    assert parse_options("A. 300, 400;B. 400, 300;C. 3000, 4000;D. 4000, 3000; E. No correct answer") == [
        "300, 400",
        "400, 300",
        "3000, 4000",
        "4000, 3000",
        "No correct answer",
    ]
    # real rows: options run together without ";", and figure labels such as ";C." inside an option
    assert parse_options("A. 45° B. 60° ;C. 120°; D. No correct answer") == [
        "45°",
        "60°",
        "120°",
        "No correct answer",
    ]
    assert parse_options("A. to get Shape ;C.; B. to get Shape ;C.; C. No") == [
        "to get Shape ;C.",
        "to get Shape ;C.",
        "No",
    ]


def test_official_letter_extraction():
    assert official_letter("... so the Answer: B.") == "B"
    assert official_letter("Answer: <C>") == "C"
    assert official_letter("the answer is B") is None  # no capital "Answer": the official rule finds nothing


def test_classify_every_category():
    assert classify(Group(2, (True, True), True)) == {
        "IK": False,
        "IG": False,
        "CM_strict": True,
        "CM_loose": True,
        "RM_strict": False,
        "RM_loose": False,
    }
    assert classify(Group(2, (True, False), True)) == {
        "IK": False,
        "IG": False,
        "CM_strict": False,
        "CM_loose": True,
        "RM_strict": True,
        "RM_loose": False,
    }
    assert classify(Group(3, (False, False, False), True)) == {
        "IK": False,
        "IG": False,
        "CM_strict": False,
        "CM_loose": False,
        "RM_strict": True,
        "RM_loose": True,
    }
    assert classify(Group(3, (True, True, True), False))["IG"] is True
    assert classify(Group(3, (True, False, True), False))["IK"] is True


def test_four_dimensional_metrics_on_crafted_patterns():
    groups = [
        Group(2, (True, True), True),  # CM strict + loose
        Group(2, (True, False), True),  # RM strict, CM loose
        Group(2, (False, False), True),  # RM strict + loose
        Group(2, (True, True), False),  # IG
        Group(3, (False, True, False), False),  # IK
        Group(3, (False, False, False), False),  # IK
        Group(3, (True, True, True), True),  # CM strict + loose
        Group(3, (True, True, True), False),  # IG
    ]
    metrics, counts = four_dimensional(groups)
    assert counts == {"IK": 2, "IG": 2, "CM_strict": 2, "CM_loose": 3, "RM_strict": 2, "RM_loose": 1}
    assert metrics["IK"] == 0.25 and metrics["IG"] == 0.25  # 2 / 8
    assert metrics["CM_strict"] == 0.25 and metrics["CM_loose"] == 0.375  # 2 / 8, 3 / 8
    assert metrics["RM_strict"] == 0.5  # 2 / (2 + 2)
    assert metrics["RM_loose"] == 0.25  # 1 / (3 + 1)
    assert metrics["score_strict"] == 0.375  # (8 − 0.5·2 − 2 − 2) / 8
    assert metrics["score_loose"] == 0.5  # (8 − 0.5·2 − 1 − 2) / 8
    assert metrics["S1"] == 0.6  # 12 right sub-problems of 20
    assert metrics["S2"] == 0.75  # composites of 2-step groups: T, T, T, F
    assert metrics["S3"] == 0.25  # composites of 3-step groups: F, F, T, F


RESPONSES = {
    # group 2steps_1 (answers C, A, multi A): all right → CM strict
    "2steps_1/2steps_1": ["\\boxed{C}"],
    "2steps_1/2steps_2": ["\\boxed{A}"],
    "2steps_1/2steps_multi": ["\\boxed{First walk 3000m northeast, then walk 4000m east}"],  # option A's text
    # group 2steps_2 (A, C, multi C): first step wrong, composite right → RM strict, CM loose
    "2steps_2/2steps_1": ["\\boxed{B}"],
    "2steps_2/2steps_2": ["\\boxed{C}"],
    "2steps_2/2steps_multi": ["Answer: C"],
    # group 3steps_1 (D, B, D, multi D): steps right, composite wrong → IG
    "3steps_1/3steps_1": ["\\boxed{D}"],
    "3steps_1/3steps_2": ["\\boxed{B}"],
    "3steps_1/3steps_3": ["\\boxed{D}"],
    "3steps_1/3steps_multi": ["\\boxed{A}"],
    # group 3steps_2 (B, B, B, multi B): all wrong, composite missing → IK
    "3steps_2/3steps_1": ["\\boxed{A}"],
    "3steps_2/3steps_2": ["\\boxed{A}"],
    "3steps_2/3steps_3": ["\\boxed{A}"],
}


def test_wemath_fixture_groups(fixtures_dir):
    problems = load_benchmark("wemath", fixtures_dir / "eval" / "we-math", annotations_only=True)
    assert len(problems) == 14
    results, records = score_responses("wemath", problems, RESPONSES, scoring="verified")
    m = results["metrics"]
    assert m["IK"] == 0.25 and m["IG"] == 0.25 and m["CM_strict"] == 0.25 and m["CM_loose"] == 0.5
    assert m["RM_strict"] == 0.5  # 1 / (1 + 1)
    assert m["RM_loose"] == 0.0  # 0 / (2 + 0)
    assert m["score_strict"] == 0.375  # (4 − 0.5 − 1 − 1) / 4
    assert m["score_loose"] == 0.625  # (4 − 0.5 − 0 − 1) / 4
    assert m["S1"] == 0.6  # 6 of 10 sub-problems
    assert m["S2"] == 1.0 and m["S3"] == 0.0
    assert m["accuracy"] == pytest.approx(8 / 14)  # per-row accuracy
    assert results["overall"] == 0.375  # the strict score is We-Math's headline
    assert results["breakdowns"]["four_dimensional"]["counts"]["groups"] == 4
    assert results["missing_ids"] == ["3steps_2/3steps_multi"]
    assert records["2steps_1/2steps_multi"].correct == [True]


def test_incomplete_groups_are_left_out(fixtures_dir):
    problems = load_benchmark("wemath", fixtures_dir / "eval" / "we-math", annotations_only=True)
    kept = [p for p in problems if p.id != "3steps_1/3steps_2"]  # e.g. cut by --limit
    results, _ = score_responses("wemath", kept, RESPONSES, scoring="verified")
    counts = results["breakdowns"]["four_dimensional"]["counts"]
    assert counts["groups"] == 3 and counts["incomplete_groups"] == 1
    assert results["metrics"]["score_strict"] == pytest.approx((3 - 0 - 1 - 1) / 3)  # no IG left


def test_letters_win_over_letter_shaped_option_values():
    """Real row 2steps_9/2steps_1 has options "F; D; B; I; No correct answer" and gold D (= "I")."""
    from corl_vl.data.problem import Problem
    from corl_vl.eval.scoring import get_scorer

    problem = Problem(
        "g/2steps_1",
        "Which point?",
        choices=["F", "D", "B", "I", "No correct answer"],
        answer="D",
        meta={"group": "g", "step": "1", "steps": 2},
    )
    verdicts = get_scorer("wemath", scoring="verified").score_record(
        problem, ["\\boxed{D}", "\\boxed{I}", "\\boxed{B}", "Answer: D"]
    )
    assert verdicts.correct == [True, True, False, True]
