"""Rewards on one worked example (3 agents, 2 problems, K = 4), every number written by hand.

agent 0: p1 = [1, 2, 2, None]            p2 = [5, 6, 5, 7]
agent 1: p1 = [2, 2, 1, None]            p2 = [6, 6, 5, None]
agent 2: p1 = [1/2, 0.5, 1, \\frac12]     p2 = [7, 5, 5, 7]
"""

from __future__ import annotations

import math

import pytest
import torch

from corl_vl.errors import CorlError
from corl_vl.rewards import (
    co_rewarding_i_rewards,
    empo_rewards,
    gt_rewards,
    intuitor_rewards,
    match_rewards,
    peer_pseudo_labels,
    peer_rewards,
    rent_rewards,
    ttrl_rewards,
)
from corl_vl.rewards.topology import all_peers, ring

A0 = {"p1": ["1", "2", "2", None], "p2": ["5", "6", "5", "7"]}
A1 = {"p1": ["2", "2", "1", None], "p2": ["6", "6", "5", None]}
A2 = {"p1": ["1/2", "0.5", "1", "\\frac12"], "p2": ["7", "5", "5", "7"]}


def test_peer_rewards_ring() -> None:
    # ring(3): 0 <- 1, 1 <- 2, 2 <- 0
    rewards, labels = peer_rewards([A0, A1, A2], ring(3))
    assert {p: (v.label, v.share) for p, v in labels[0].items()} == {"p1": ("2", 0.5), "p2": ("6", 0.5)}
    assert {p: (v.label, v.share) for p, v in labels[1].items()} == {"p1": ("1/2", 0.75), "p2": (None, 0.0)}
    assert {p: (v.label, v.share) for p, v in labels[2].items()} == {"p1": ("2", 0.5), "p2": ("5", 0.5)}
    assert rewards[0] == {"p1": [0.0, 1.0, 1.0, 0.0], "p2": [0.0, 1.0, 0.0, 0.0]}
    assert rewards[1] == {"p1": [0.0, 0.0, 0.0, 0.0], "p2": [0.0, 0.0, 0.0, 0.0]}  # p2: 7 vs 5 tie
    assert rewards[2] == {"p1": [0.0, 0.0, 0.0, 0.0], "p2": [0.0, 1.0, 1.0, 0.0]}


def test_all_peers_pools_every_other_agent() -> None:
    labels = peer_pseudo_labels([A0, A1, A2], all_peers(3))
    # agent 0, p1: {2: 2, 1: 2, 1/2: 3} of 8; p2: {6: 2, 5: 3, 7: 2} of 8
    assert labels[0]["p1"].label == "1/2" and labels[0]["p1"].share == 3 / 8
    assert labels[0]["p2"].label == "5" and labels[0]["p2"].share == 3 / 8
    rewards, _ = peer_rewards([A0, A1, A2], all_peers(3))
    assert rewards[0] == {"p1": [0.0, 0.0, 0.0, 0.0], "p2": [1.0, 0.0, 1.0, 0.0]}


def test_own_answers_never_vote() -> None:
    # Agent 0 unanimously says 9; its only supervisor says 4: the label is 4, so agent 0 gets 0.
    rewards, labels = peer_rewards([{"p": ["9", "9"]}, {"p": ["4", None]}], ring(2))
    assert labels[0]["p"].label == "4" and rewards[0]["p"] == [0.0, 0.0]
    assert labels[1]["p"].label == "9" and rewards[1]["p"] == [0.0, 0.0]


def test_mismatched_problem_ids_raise() -> None:
    with pytest.raises(CorlError, match=r"agent 1 answered different problem ids.*missing \['p2'\]"):
        peer_pseudo_labels([A0, {"p1": A1["p1"]}, A2], ring(3))
    with pytest.raises(CorlError, match="answers from 2 agents for a topology of 3"):
        peer_pseudo_labels([A0, A1], ring(3))
    with pytest.raises(CorlError, match="no label entry for problem id 'p2'"):
        match_rewards(A0, {"p1": "2"})


def test_match_rewards_with_choices() -> None:
    answers = {"q": ["C", "145", "B", None]}
    rewards = match_rewards(answers, {"q": "145°"}, {"q": ["135°", "140°", "145°", "150°"]})
    assert rewards == {"q": [1.0, 1.0, 0.0, 0.0]}


def test_ttrl_own_majority() -> None:
    assert ttrl_rewards(A0) == {"p1": [0.0, 1.0, 1.0, 0.0], "p2": [1.0, 0.0, 1.0, 0.0]}
    assert ttrl_rewards(A2)["p2"] == [0.0, 0.0, 0.0, 0.0]  # 7 and 5 tie


def test_empo_cluster_frequency() -> None:
    assert empo_rewards(A0) == {"p1": [0.25, 0.5, 0.5, 0.0], "p2": [0.5, 0.25, 0.5, 0.25]}
    assert empo_rewards(A2)["p1"] == [0.75, 0.75, 0.25, 0.75]
    assert empo_rewards({"p": ["1", "2", "3", None]}) == {"p": [0.0, 0.0, 0.0, 0.0]}  # all distinct


def test_gt_rewards() -> None:
    assert gt_rewards(A2, {"p1": "0.5", "p2": "5"}) == {
        "p1": [1.0, 1.0, 0.0, 1.0],
        "p2": [0.0, 1.0, 1.0, 0.0],
    }
    with pytest.raises(CorlError, match="problem id 'p2' has no gold answer"):
        gt_rewards(A2, {"p1": "0.5", "p2": None})


def test_co_rewarding_i_views_label_each_other() -> None:
    original, rephrased = co_rewarding_i_rewards(A0, A1)
    assert original == {"p1": [0.0, 1.0, 1.0, 0.0], "p2": [0.0, 1.0, 0.0, 0.0]}  # labels 2 and 6 (from A1)
    assert rephrased == {"p1": [1.0, 1.0, 0.0, 0.0], "p2": [0.0, 0.0, 1.0, 0.0]}  # labels 2 and 5 (from A0)


# Two completion tokens with logits [0, 0] and [2, 0]:
#   self-certainty = logsumexp − mean: ln 2 = 0.693147 and ln(e^2 + 1) − 1 = 1.126928
#   entropy: ln 2 = 0.693147 and 0.880797·0.126928 + 0.119203·2.126928 = 0.365334
LOGITS = torch.tensor([[[0.0, 0.0], [2.0, 0.0]]])


def test_intuitor_from_logits_and_logprobs() -> None:
    both = torch.tensor([[1, 1]])
    assert intuitor_rewards(LOGITS, both).item() == pytest.approx((0.693147 + 1.126928) / 2, abs=1e-5)
    assert intuitor_rewards(LOGITS, torch.tensor([[1, 0]])).item() == pytest.approx(0.693147, abs=1e-5)
    logprobs = torch.log_softmax(LOGITS, dim=-1)
    assert intuitor_rewards(logprobs, both).item() == pytest.approx(0.910038, abs=1e-5)
    # temperature 2 turns [2, 0] into [1, 0]: ln(e + 1) − 0.5 = 0.813262
    assert intuitor_rewards(LOGITS, torch.tensor([[0, 1]]), temperature=2.0).item() == pytest.approx(
        0.813262, abs=1e-5
    )


def test_rent_negative_entropy() -> None:
    assert rent_rewards(LOGITS, torch.tensor([[1, 1]])).item() == pytest.approx(-0.529241, abs=1e-5)
    assert rent_rewards(LOGITS, torch.tensor([[0, 1]])).item() == pytest.approx(-0.365334, abs=1e-5)


def test_per_token_inputs_and_empty_rows() -> None:
    per_token = torch.tensor([[0.5, 1.5, 9.0], [4.0, 4.0, 4.0]])
    mask = torch.tensor([[1, 1, 0], [0, 0, 0]])
    assert intuitor_rewards(per_token, mask).tolist() == [1.0, 0.0]
    assert rent_rewards(per_token, mask).tolist() == [-1.0, 0.0]
    assert not math.isnan(rent_rewards(LOGITS, torch.tensor([[0, 0]])).item())
