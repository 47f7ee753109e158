"""Voting: clusters by equivalence, share over all answers, explicit tie policy, minimum share."""

from __future__ import annotations

import pytest

from corl_vl.answers import Vote, vote
from corl_vl.errors import CorlError


def test_equivalent_spellings_vote_together() -> None:
    # String voting would give 3 (2 votes) vs 1/2, 0.5, \frac12 (1 each); by equivalence 1/2 has 3 of 6.
    v = vote(["3", "1/2", "0.5", None, "3", "\\frac{1}{2}"])
    assert v == Vote(label="1/2", share=3 / 6, clusters=[("1/2", 3), ("3", 2)], n_votes=5)


def test_label_is_the_most_frequent_spelling_of_the_winning_cluster() -> None:
    v = vote(["0.5", "1/2", "1/2", "7"])
    assert v.label == "1/2" and v.share == 0.75 and v.clusters == [("0.5", 3), ("7", 1)]


def test_tie_gives_no_label_by_default() -> None:
    v = vote(["2", "1", "1", "2", None])
    assert v.label is None and v.share == 0.0
    assert v.clusters == [("2", 2), ("1", 2)] and v.n_votes == 4


def test_tie_policy_first_reproduces_first_seen_wins() -> None:
    assert vote(["2", "1", "1", "2"], tie_policy="first").label == "2"
    assert vote(["1", "2", "2", "1"], tie_policy="first").label == "1"
    with pytest.raises(CorlError, match="tie_policy"):
        vote(["1"], tie_policy="random")


def test_min_share_counts_unparseable_answers() -> None:
    answers = ["4", "4", None, None, "5"]
    assert vote(answers).label == "4" and vote(answers).share == 2 / 5
    assert vote(answers, min_share=0.5).label is None
    assert vote(answers, min_share=0.4).label == "4"


def test_no_answers() -> None:
    assert vote([]) == Vote(None, 0.0, [], 0)
    assert vote([None, None, ""]) == Vote(None, 0.0, [], 0)


def test_multiple_choice_letters_and_values_cluster() -> None:
    choices = ["135°", "140°", "145°", "150°"]
    v = vote(["C", "145°", "(C)", "B"], choices=choices)
    assert v.label == "C" and v.share == 0.75 and v.clusters == [("C", 3), ("B", 1)]
