"""The separatrix grid's direction rule (benchmarks/science/separatrix_report.py) on hand-written numbers."""

from __future__ import annotations

import pytest

from benchmarks.science.separatrix_report import classify, shares


def test_above_the_line_the_sum_must_rise_and_below_it_fall():
    up = classify((0.7, 0.6), (0.8, 0.65))  # margin +0.3, both rise
    assert (up["region"], up["predicted"], up["match"], up["both"]) == ("away", 1, True, True)
    assert up["delta_sum"] == pytest.approx(0.15)
    # the sum rises although B falls: the sum matches, the stricter per-agent reading does not
    mixed = classify((0.9, 0.3), (0.95, 0.28))
    assert (mixed["predicted"], mixed["match"], mixed["both"]) == (1, True, False)
    down = classify((0.2, 0.3), (0.1, 0.35))  # margin −0.5, sum falls by 0.05
    assert (down["predicted"], down["match"], down["both"]) == (-1, True, False)
    wrong = classify((0.2, 0.3), (0.3, 0.3))
    assert (wrong["predicted"], wrong["match"]) == (-1, False)


def test_near_the_line_and_on_it():
    near = classify((0.5, 0.55), (0.4, 0.5))  # margin +0.05: near, and the sum fell
    assert (near["region"], near["match"]) == ("near", False)
    assert classify((0.5, 0.41), (0.6, 0.5))["region"] == "near"  # |−0.09| < 0.1
    assert classify((0.5, 0.39), (0.6, 0.5))["region"] == "away"  # |−0.11| ≥ 0.1
    on = classify((0.5, 0.5), (0.6, 0.6))  # exactly on the line: the theorem predicts no direction
    assert (on["predicted"], on["match"]) == (0, False)
    still = classify((0.8, 0.8), (0.8, 0.8))  # no change never matches
    assert still["match"] is False


def test_shares_count_each_region_apart():
    rows = [
        classify((0.8, 0.8), (0.9, 0.9)),
        classify((0.2, 0.2), (0.3, 0.3)),
        classify((0.5, 0.55), (0.6, 0.6)),
    ]
    s = shares(rows)
    assert (
        s["away"]["n"] == 2 and s["away"]["match"] == 0.5 and s["near"] == {"n": 1, "match": 1.0, "both": 1.0}
    )


def test_two_outcome_projection_keeps_only_the_right_answer_and_the_shared_mistake():
    from benchmarks.science.separatrix_report import coordinates, two_outcome

    assert two_outcome(0.4, 0.4) == pytest.approx(0.5)  # 20 % other answers: a tie between right and mistake
    assert two_outcome(0.3, 0.1) == pytest.approx(0.75) and two_outcome(0.0, 0.0) == 0.5
    result = {
        "agents": ["a", "b"],
        "calibration": {
            "a": {"0.5": {"p": 0.4, "p_mistake": 0.4}},
            "b": {"0.2": {"p": 0.6, "p_mistake": 0.2}},
        },
    }
    run = {
        "rate_a": 0.5,
        "rate_b": 0.2,
        "p_before": [0.4, 0.6],
        "p_after": [0.5, 0.7],
        "p_mistake_after": [0.5, 0.1],
    }
    assert coordinates(result, run, "p") == ([0.4, 0.6], [0.5, 0.7])
    start, end = coordinates(result, run, "two")
    assert start == pytest.approx([0.5, 0.75]) and end == pytest.approx([0.5, 0.875])
