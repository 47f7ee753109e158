"""Majority-vote ensembles (matched-budget control): pooling, equivalence clusters, ties, missing records."""

from __future__ import annotations

import pytest

from corl_vl.eval.ensemble import ensemble_scores, pool
from corl_vl.eval.loaders import load_benchmark

IDS = [
    "test/number_theory/572.json",  # gold 9
    "test/prealgebra/1622.json",  # gold 42
    "test/algebra/2584.json",  # gold \frac{14}{3}
    "test/number_theory/515.json",  # gold 27
    "test/precalculus/807.json",  # no responses at all
]
A = {
    IDS[0]: ["\\boxed{9}", "\\boxed{8}", "\\boxed{7}"],  # the third is beyond k = 2
    IDS[1]: ["\\boxed{42}", "\\boxed{41}"],
    IDS[2]: ["\\boxed{\\frac{14}{3}}", "\\boxed{4.6667}"],
}
B = {
    IDS[0]: ["\\boxed{8}", "\\boxed{9}"],
    IDS[1]: ["\\boxed{41}", "\\boxed{41}"],
    IDS[2]: ["\\boxed{14/3}", "\\boxed{5}"],
    IDS[3]: ["\\boxed{27}"],
}


@pytest.fixture(scope="module")
def problems(fixtures_dir):
    by_id = {p.id: p for p in load_benchmark("math500", fixtures_dir / "eval" / "math500")}
    return [by_id[i] for i in IDS]


def test_pool_takes_k_from_each_set_in_order():
    assert pool([A, B], IDS[0], 2) == ["\\boxed{9}", "\\boxed{8}", "\\boxed{8}", "\\boxed{9}"]
    assert pool([A, B], IDS[3], 2) == ["\\boxed{27}"]


def test_majority_vote_with_first_seen_ties(problems):
    results, records = ensemble_scores("math500", problems, [A, B], 2)
    # 572: 9, 8, 8, 9 → tie, first seen "9" wins → right
    # 1622: 42, 41, 41, 41 → 41 (share 3/4) → wrong
    # 2584: 14/3 twice (\frac and a/b are one cluster), 4.6667, 5 → \frac{14}{3} (share 2/4) → right
    # 515: 27 alone → right; 807: nothing → wrong, missing
    assert [records[i].vote for i in IDS] == ["9", "41", "\\frac{14}{3}", "27", None]
    assert [records[i].correct for i in IDS] == [[True], [False], [True], [True], []]
    assert records[IDS[1]].vote_share == 0.75 and records[IDS[2]].vote_share == 0.5
    assert results["overall"] == pytest.approx(3 / 5)
    assert results["missing_ids"] == [IDS[4]]
    assert results["ensemble"] == {"members": 2, "k_per_member": 2, "tie_policy": "first"}
    line = records[IDS[0]].to_json()
    assert line["vote"] == "9" and line["correct"] is True and len(line["responses"]) == 4


def test_ties_give_no_label_under_tie_policy_none(problems):
    results, records = ensemble_scores("math500", problems, [A, B], 2, tie_policy="none")
    assert records[IDS[0]].vote is None and records[IDS[0]].correct == [False]
    assert results["overall"] == pytest.approx(2 / 5)
    assert results["metrics"]["no_label_rate"] == pytest.approx(2 / 5)  # the tie and the missing record


def test_letters_and_option_values_vote_together(fixtures_dir):
    problems = load_benchmark("mathvista", fixtures_dir / "eval" / "mathvista", annotations_only=True)
    pid3 = [p for p in problems if p.id == "3"]  # choices 135°, 140°, 145°, 150°; gold 145°
    a = {"3": ["\\boxed{C}", "\\boxed{140°}"]}
    b = {"3": ["\\boxed{145°}", "\\boxed{B}"]}
    _, records = ensemble_scores("mathvista", pid3, [a, b], 2, tie_policy="none")
    # clusters: {C, 145°} = 2 votes, {140°, B} = 2 votes → a tie → no label
    assert records["3"].vote is None
    _, records = ensemble_scores("mathvista", pid3, [a, b], 1)
    # k = 1: C and 145° are the same option → label C (first spelling), judged right
    assert records["3"].vote == "C" and records["3"].vote_share == 1.0 and records["3"].correct == [True]
