"""The pure helpers of the cohort benchmarks (benchmarks/science/cohort_stats.py), with hand-written numbers."""

from __future__ import annotations

import pytest

from benchmarks.science.cohort_stats import gain, kept_share, ranks, spearman, weak_skills


def _eval(step: int, a: tuple[float, float, float]) -> dict:
    return {"step": step, "x": {"overall": a[0], "per_skill": {"circle": a[1], "ground": a[2]}}}


def test_gain_is_last_minus_first_on_the_mean_of_the_skills():
    evals = [_eval(0, (0.5, 0.25, 0.75)), _eval(10, (0.0, 0.0, 0.0)), _eval(20, (0.75, 0.75, 0.75))]
    assert gain(evals, "x") == pytest.approx(0.25)
    assert gain(evals, "x", ["circle"]) == pytest.approx(0.5)
    assert gain(evals, "x", ["circle", "ground"]) == pytest.approx(0.25)  # (0.5 + 0) / 2


def test_ranks_average_ties():
    assert ranks([3.0, 1.0, 2.0]) == [3.0, 1.0, 2.0]
    assert ranks([1.0, 2.0, 2.0, 5.0]) == [1.0, 2.5, 2.5, 4.0]


def test_spearman_sign_and_hand_value():
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    # ranks x 1..5, y = 2,1,4,3,5: d² = 1+1+1+1+0 = 4, ρ = 1 − 6·4 / (5·24) = 0.8
    assert spearman([1, 2, 3, 4, 5], [0.2, 0.1, 0.4, 0.3, 0.5]) == pytest.approx(0.8)
    # monotone transforms leave ρ unchanged
    assert spearman([-0.6, 0.1, 0.9], [0.5, 0.2, 0.0]) == spearman([1, 2, 3], [9, 4, 1])


def test_spearman_undefined_cases():
    assert spearman([1.0], [2.0]) is None
    assert spearman([1.0, 1.0, 1.0], [1.0, 2.0, 3.0]) is None
    with pytest.raises(ValueError):
        spearman([1.0, 2.0], [1.0])


def test_kept_share_of_gt_gain():
    assert kept_share([0.2, 0.4], [0.4, 0.4]) == pytest.approx(0.75)
    assert kept_share([0.2], [0.0]) is None  # GT gained nothing: no share
    assert kept_share([-0.1], [0.2]) == pytest.approx(-0.5)


def test_weak_skills_from_the_warm_start_record():
    assert weak_skills({"spec": {"weak_skills": ["ground"]}}) == ["ground"]
    assert weak_skills({"spec": {"weak_skills": []}}) == []
