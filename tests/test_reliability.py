"""Label-free reliability and weighted votes on worked examples, every number written by hand."""

from __future__ import annotations

import itertools
import math

import pytest

from corl_vl.answers import vote
from corl_vl.errors import CorlError
from corl_vl.rewards.peer import weighted_peer_rewards, weighted_vote
from corl_vl.rewards.reliability import (
    MIN_WEIGHT,
    ReliabilityTracker,
    agreement_reliability,
    cluster_cohort,
    dawid_skene,
    estimate,
    vote_weights,
)
from corl_vl.rewards.topology import all_peers, ring


def textbook_cohort(accuracy: tuple[float, float, float]) -> list[dict[str, list[str]]]:
    """Binary questions, 1000 with answer A and 1000 with B; every pattern of right/wrong agents appears exactly
    as often as the one-coin model says (e.g. all three right: 1000 · 0.9 · 0.8 · 0.6 = 432 times)."""
    answers: list[dict[str, list[str]]] = [{}, {}, {}]
    n = 0
    for truth, other in (("A", "B"), ("B", "A")):
        for pattern in itertools.product((True, False), repeat=3):
            count = round(1000 * math.prod(p if ok else 1 - p for p, ok in zip(accuracy, pattern)))
            for _ in range(count):
                for j, ok in enumerate(pattern):
                    answers[j][f"q{n}"] = [truth if ok else other]
                n += 1
    assert n == 2000
    return answers


def test_dawid_skene_recovers_accuracies_from_agreements_alone() -> None:
    # The textbook identifiability argument: for binary answers, P(j agrees with k) = p_j p_k + (1-p_j)(1-p_k),
    # so (2a_jk - 1) = (2p_j - 1)(2p_k - 1) and p_1 = (1 + sqrt((2a12-1)(2a13-1)/(2a23-1)))/2.
    # With p = (0.9, 0.8, 0.6): a12 = 0.74, a13 = 0.58, a23 = 0.56 → p_1 = (1 + sqrt(0.48·0.16/0.12))/2 = 0.9.
    answers = textbook_cohort((0.9, 0.8, 0.6))
    ids = list(answers[0])

    def agree(j: int, k: int) -> float:
        return sum(answers[j][q] == answers[k][q] for q in ids) / len(ids)

    assert (agree(0, 1), agree(0, 2), agree(1, 2)) == pytest.approx((0.74, 0.58, 0.56), abs=1e-12)
    d = [math.sqrt((2 * agree(0, 1) - 1) * (2 * agree(0, 2) - 1) / (2 * agree(1, 2) - 1))]
    assert (1 + d[0]) / 2 == pytest.approx(0.9)

    # EM sees only the answers (no truth) and lands on the same accuracies.
    choices = {q: ["yes", "no"] for q in ids}  # two options: a unanimous answer still has a rival
    result = dawid_skene(cluster_cohort(answers, choices=choices), tol=1e-9)
    assert result.converged
    assert result.accuracy == pytest.approx([0.9, 0.8, 0.6], abs=1e-5)
    # The posterior of a problem where only the 0.6 agent dissents follows the two better agents:
    # P(A | 0.9 and 0.8 say A, 0.6 says B) = 0.9·0.8·0.4 / (0.9·0.8·0.4 + 0.1·0.2·0.6) = 0.288/0.300 = 0.96.
    q = next(q for q in ids if answers[0][q] == answers[1][q] == ["A"] and answers[2][q] == ["B"])
    post = dict(zip(cluster_cohort(answers, choices=choices)[q].candidates, result.posteriors[q]))
    assert post["A"] == pytest.approx(0.96, abs=1e-4)


# agent 0: q1 [5, 5], q2 [7, None];  agent 1: q1 [5, 6], q2 [7, 7];  agent 2: q1 [6, 6], q2 [8, 7]
SMALL = [
    {"q1": ["5", "5"], "q2": ["7", None]},
    {"q1": ["5", "6"], "q2": ["7", "7"]},
    {"q1": ["6", "6"], "q2": ["8", "7"]},
]


def test_agreement_with_the_leave_one_out_majority() -> None:
    problems = cluster_cohort(SMALL)
    assert problems["q1"].candidates == ["5", "6"] and problems["q1"].counts == [[2, 0], [1, 1], [0, 2]]
    assert problems["q2"].totals == [2, 2, 2]
    # agent 0: q1 others {5: 1, 6: 3} → 6, its share 0; q2 others {7: 3, 8: 1} → 7, its share 1/2 → 0.25
    # agent 1: q1 others {5: 2, 6: 2} tie → skipped; q2 others {7: 2, 8: 1} → 7, its share 1 → 1.0
    # agent 2: q1 others {5: 3, 6: 1} → 5, its share 0; q2 others {7: 3} → 7, its share 1/2 → 0.25
    assert agreement_reliability(problems) == [0.25, 1.0, 0.25]
    assert estimate("agreement", problems, ["q1"]) == [0.0, None, 0.0]
    with pytest.raises(CorlError, match="unknown reliability estimator"):
        estimate("oracle", problems)


def test_clusters_use_answer_equivalence() -> None:
    problems = cluster_cohort([{"q": ["1/2", "0.5"]}, {"q": ["\\frac12", "2"]}])
    assert problems["q"].candidates == ["1/2", "2"]
    assert problems["q"].counts == [[2, 0], [1, 1]]


def test_dawid_skene_sees_through_a_collapsed_agent_where_agreement_does_not() -> None:
    # Six problems whose answers are 1..6. Agent 0 is always right, agent 1 right on 3 of its 4 samples,
    # agent 2 has collapsed: "3" everywhere (right only on q3).
    answers = [
        {f"q{t}": [str(t)] * 4 for t in range(1, 7)},
        {f"q{t}": [str(t)] * 3 + ["9"] for t in range(1, 7)},
        {f"q{t}": ["3"] * 4 for t in range(1, 7)},
    ]
    problems = cluster_cohort(answers)
    ds = dawid_skene(problems)
    assert ds.accuracy[0] > ds.accuracy[1] > 0.5 > ds.accuracy[2]
    # agreement: agent 0's leave-one-out majority is the collapsed agent's "3" (4 votes against 3) on q1, q2,
    # q4, q5, q6, so agent 0 — the perfect one — agrees only on q3: 1/6
    assert agreement_reliability(problems)[0] == pytest.approx(1 / 6)


def test_vote_weights_are_log_odds_against_the_other_answers() -> None:
    assert vote_weights([0.9, 0.5, 0.1, None]) == pytest.approx([math.log(9), MIN_WEIGHT, MIN_WEIGHT, 1.0])
    # three candidates: log(p/(1-p)) + log 2, so 0.5 is better than chance (1/3) and 0.25 is worse
    assert vote_weights([0.9, 0.5, 0.25], 3) == pytest.approx([math.log(18), math.log(2), MIN_WEIGHT])


def test_weighted_vote_matches_the_plain_vote_without_reliability() -> None:
    groups = [["1", "2", "2", None], ["1/2", "0.5", "1", "\\frac12"]]
    plain = vote([a for g in groups for a in g])
    weighted = weighted_vote(groups)
    assert (weighted.label, weighted.share, weighted.clusters) == (plain.label, plain.share, plain.clusters)
    assert weighted.shares == [("1/2", 3 / 8), ("1", 2 / 8), ("2", 2 / 8)]


def test_a_reliable_voter_outweighs_a_tie() -> None:
    groups = [["4"] * 4, ["3"] * 4]
    assert weighted_vote(groups).label is None  # 4 against 4: no label
    v = weighted_vote(groups, [0.9, 0.1])  # weights log 9 and the floor
    assert v.label == "4"
    assert v.share == pytest.approx(4 * math.log(9) / (4 * math.log(9) + 4 * MIN_WEIGHT))


def test_weighted_peer_rewards_silence_a_collapsed_peer() -> None:
    answers = [
        {"q": ["5", "3", "2", None]},  # agent 0
        {"q": ["5", "5", "5", "2"]},  # agent 1: good
        {"q": ["3", "3", "3", "3"]},  # agent 2: collapsed
    ]
    # uniform: agent 0's label pools agents 1 and 2 → "3" (4 votes) beats "5" (3 votes)
    _, labels = weighted_peer_rewards(answers, all_peers(3))
    assert labels[0]["q"].label == "3"
    # reliability 0.8 and 0.05 among 3 candidates (5, 2, 3): w1 = log 4 + log 2 = log 8, w2 = floor
    rel = {"q": [None, 0.8, 0.05]}
    rewards, labels = weighted_peer_rewards(answers, all_peers(3), reliability=rel)
    denom = 4 * math.log(8) + 4 * MIN_WEIGHT
    assert labels[0]["q"].label == "5"
    assert labels[0]["q"].share == pytest.approx(3 * math.log(8) / denom)
    assert rewards[0]["q"] == [1.0, 0.0, 0.0, 0.0]
    # soft: each answer earns its cluster's weighted share; the unparseable one earns 0
    soft, _ = weighted_peer_rewards(answers, all_peers(3), reliability=rel, soft=True)
    expected = [3 * math.log(8) / denom, 4 * MIN_WEIGHT / denom, math.log(8) / denom, 0.0]
    assert soft[0]["q"] == pytest.approx(expected)
    # abstain when the weighted winning share is below the threshold: no label, no reward, hard or soft
    for is_soft in (False, True):
        r, lab = weighted_peer_rewards(answers, all_peers(3), reliability=rel, soft=is_soft, min_share=0.8)
        assert lab[0]["q"].label is None and r[0]["q"] == [0.0] * 4


def test_own_answers_never_vote_even_when_reliable() -> None:
    answers = [{"q": ["9", "9"]}, {"q": ["4", None]}]
    rewards, labels = weighted_peer_rewards(answers, ring(2), reliability={"q": [0.99, 0.01]}, soft=True)
    assert labels[0]["q"].label == "4" and rewards[0]["q"] == [0.0, 0.0]
    assert labels[1]["q"].label == "9" and rewards[1]["q"] == [0.0, 0.0]  # agent 1 answered 4 and nothing


def test_tracker_moving_average_per_agent_and_tag() -> None:
    t = ReliabilityTracker(2, decay=0.5)
    assert t.update([0.8, None]) == [0.8, None]  # first estimate taken as is; no estimate keeps the old value
    assert t.update([0.4, 0.6]) == pytest.approx([0.6, 0.6])
    assert t.get("color") == pytest.approx([0.6, 0.6])  # no tagged value yet: the overall one
    t.update([1.0, None], "color")
    assert t.get("color") == pytest.approx([1.0, 0.6])
    restored = ReliabilityTracker(2, decay=0.5)
    restored.load_state_dict(t.state_dict())
    assert restored.get("color") == t.get("color") and restored.get() == t.get()
    with pytest.raises(CorlError, match="decay"):
        ReliabilityTracker(2, decay=1.0)
