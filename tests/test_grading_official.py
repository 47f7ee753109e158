"""Official scoring reproduces the benchmarks' own verdicts on real published responses (fixtures copied from
MathVista's and MATH-V's published outputs), and verified scoring differs only where the official rules are
known to be wrong."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from corl_vl.eval.scoring import score_responses
from corl_vl.eval.scoring.mathvision_official import official_correct, official_extract
from corl_vl.eval.scoring.records import record_problem

GRADED = Path(__file__).parent / "fixtures" / "graded"
FILES = sorted(p.name for p in GRADED.glob("*.jsonl"))


def _load(name: str) -> tuple[str, list[dict]]:
    rows = [json.loads(line) for line in (GRADED / name).read_text().splitlines()]
    return name.split("_", 1)[0], rows


@pytest.mark.parametrize("name", FILES)
def test_official_scoring_matches_published_verdicts(name: str) -> None:
    benchmark, rows = _load(name)
    assert len(rows) >= 20
    problems = [record_problem(r, i) for i, r in enumerate(rows)]
    results, records = score_responses(
        benchmark, problems, {p.id: [r["response"]] for p, r in zip(problems, rows)}
    )
    verdicts = {p.id: r["official_correct"] for p, r in zip(problems, rows)}
    assert {i: rec.correct_official[0] for i, rec in records.items()} == verdicts
    assert results["overall"] == pytest.approx(sum(verdicts.values()) / len(rows))
    assert results["overall_official"] == results["overall"]
    assert results["n_disagree"] == sum(
        rec.correct_official != rec.correct_verified for rec in records.values()
    )


def test_mathvision_official_quirks_are_reproduced() -> None:
    # the official grader rejects a boxed option that carries its label and text, and compares numbers at
    # two decimals; verified scoring accepts the former and rejects the latter
    assert official_extract("So the time is \\boxed{\\text{(E) 9:30}}.") == "{e9:30}"
    assert not official_correct("{e9:30}", "E", ["9:00", "9:10", "9:15", "9:20", "9:30"])
    assert official_correct(official_extract("The answer is 94.996."), "95", None)
    assert official_correct(official_extract("\\boxed{\\frac{1}{2}}"), "0.5", None)
    assert official_correct(official_extract("(C)\nbecause ..."), "C", ["1", "2", "3", "4", "5"])
    assert official_correct(
        official_extract("\\boxed{(3, \\frac{8}{2})}"), "(3,4)", None
    )  # tuples element-wise
    # the numeric check is done without eval(): a symbol, a call or an attribute is just "not equal"
    assert not official_correct("__import__('os').system('true')", "0", None)
    assert not official_correct("x+1", "1", None)


def test_verified_scoring_accepts_labelled_options_the_official_rule_rejects() -> None:
    problem = record_problem({"id": "22", "answer": "E", "options": ["9:00", "9:10", "9:15", "9:20", "9:30"]})
    _, records = score_responses("mathvision", [problem], {"22": ["So it is \\boxed{\\text{(E) 9:30}}."]})
    assert records["22"].correct_official == [False] and records["22"].correct_verified == [True]
