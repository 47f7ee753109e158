"""Reliability-weighted supervision in the cohort step and from the CLI, on three tiny real models.

As in test_cohort, the engines' completion *texts* are controlled (the ids and logprobs stay the models' own
samples): agent 2 has "collapsed" onto the answer 3, agents 0 and 1 mostly say 5.
"""

from __future__ import annotations

import json

import pytest
from test_cohort import TINY, ForcedTexts, boxed

from corl_vl.cli import main
from corl_vl.config import apply_overrides, config_from_dict
from corl_vl.errors import CorlError
from corl_vl.train.cohort import Cohort

AGENTS = [
    {"name": "qwen", "model": "tiny-qwen2.5-vl"},
    {"name": "internvl", "model": "tiny-internvl3.5"},
    {"name": "gemma", "model": "tiny-gemma3"},
]
PAIR = "tiny-qwen2.5-vl,tiny-internvl3.5,tiny-gemma3"


def _cohort(weighting: str) -> Cohort:
    cfg = config_from_dict({"agents": AGENTS, "reward": {"topology": "all_peers", "weighting": weighting}})
    cfg = apply_overrides(cfg, TINY)
    cohort = Cohort.from_config(cfg)
    qwen, internvl, gemma = cohort.agents
    qwen.engine = ForcedTexts(qwen.engine, boxed(5, 5, 5, 2))
    internvl.engine = ForcedTexts(internvl.engine, boxed(5, 5, 5, 5))
    gemma.engine = ForcedTexts(gemma.engine, boxed(3, 3, 3, 3))
    return cohort


@pytest.fixture(scope="module")
def uniform_and_weighted():
    return _cohort("uniform"), _cohort("dawid_skene")


def test_dawid_skene_weights_come_from_the_supervisors_answers_alone(uniform_and_weighted):
    uniform, weighted = uniform_and_weighted
    uniform.step()
    # internvl's label pools qwen (5, 5, 5, 2) and gemma (3, 3, 3, 3): "3" wins 4 to 3 when votes are equal;
    # qwen's label pools internvl (four 5s) and gemma (four 3s): a tie, so no label
    assert set(uniform.last[1].labels.values()) == {"3"}
    assert set(uniform.last[0].labels.values()) == {None}
    metrics = weighted.step()
    qwen, internvl, gemma = weighted.last
    # leave-one-out: qwen's supervisors are weighed on internvl's and gemma's answers alone, which always
    # disagree (5 vs 3): equal weights, a tie, no label. internvl's are weighed on qwen (5, 5, 5, 2) against the
    # unanimous gemma, which looks the more consistent: its 3 wins. Two supervisors cannot expose a collapsed one.
    assert set(qwen.labels.values()) == {None} and set(internvl.labels.values()) == {"3"}
    assert set(gemma.labels.values()) == {"5"}
    assert all(r == [0.0] * 4 for r in gemma.rewards.values())  # gemma's label is 5; it says 3
    # reliabilities: the collapsed agent is judged the worst; every estimate is logged for every agent
    rel = {name: metrics[name]["reliability/dawid_skene"] for name in ("qwen", "internvl", "gemma")}
    assert rel["gemma"] < 0.1 < rel["qwen"] < rel["internvl"]
    # agreement with the leave-one-out majority is fooled: internvl's is gemma's "3" (4 votes to 3), qwen's
    # is a tie (no estimate), gemma's is 5 — so internvl and gemma both score 0
    assert metrics["internvl"]["reliability/agreement"] == metrics["gemma"]["reliability/agreement"] == 0.0
    assert "reliability/agreement" not in metrics["qwen"]
    saved = weighted.state_dict()["supervision"]["dawid_skene"]["values"][""]  # resumes with the run
    assert saved == [rel["qwen"], rel["internvl"], rel["gemma"]]


def test_soft_peer_reward_pays_the_weighted_share(uniform_and_weighted):
    cohort = uniform_and_weighted[0]
    cohort.cfg.reward.peer_reward = "soft"
    try:
        cohort.step()
    finally:
        cohort.cfg.reward.peer_reward = "hard"
    # qwen's supervisors: internvl (5, 5, 5, 5) and gemma (3, 3, 3, 3), equal weights: 5 and 3 each hold 1/2,
    # qwen's 2 gets nothing (no supervisor said it) — soft rewards need no tie-break
    assert all(r == [0.5, 0.5, 0.5, 0.0] for r in cohort.last[0].rewards.values())


def test_unknown_weighting_is_one_clear_error():
    with pytest.raises(CorlError, match=r"reward\.weighting: must be one of uniform, agreement, dawid_skene"):
        config_from_dict({"agents": AGENTS, "reward": {"topology": "all_peers", "weighting": "oracle"}})
    with pytest.raises(CorlError, match=r"reward\.min_weight_share"):
        config_from_dict({"agents": AGENTS, "reward": {"topology": "all_peers", "min_weight_share": 1.5}})


def test_cli_trains_a_three_agent_cohort_with_dawid_skene_weights(tmp_path, capsys):
    out = tmp_path / "run"
    sets = [
        *TINY,
        "reward.topology=all_peers",
        "reward.weighting=dawid_skene",
        "reward.min_weight_share=0.3",
    ]
    argv = ["train", "--pair", PAIR, "--max-steps", "1", "--output-dir", str(out), "--no-progress"]
    for s in sets:
        argv += ["--set", s]
    assert main(argv) == 0, capsys.readouterr().err
    rows = [
        json.loads(line)
        for line in (out / "agents" / "tiny-gemma3" / "metrics.jsonl").read_text().splitlines()
    ]
    assert rows and "reliability/dawid_skene" in rows[-1]
    assert main(["plot", str(out)]) == 0
    assert (out / "plots" / "reliability.png").is_file()


def test_reliability_is_tracked_per_tag_with_the_overall_value_as_fallback():
    from corl_vl.rewards.supervision import Supervision
    from corl_vl.rewards.topology import all_peers

    cfg = config_from_dict(
        {
            "agents": AGENTS,
            "reward": {"topology": "all_peers", "weighting": "agreement", "reliability_tag": "skill"},
        }
    )
    sup = Supervision(cfg.reward, all_peers(3), ["qwen", "internvl", "gemma"])
    answers = {
        "qwen": {"p1": ["1", "1"], "p2": ["5", "5"]},
        "internvl": {"p1": ["1", "1"], "p2": ["6", "6"]},
        "gemma": {"p1": ["2", "2"], "p2": ["6", "6"]},
    }
    sup.step(answers, ["p1", "p2"], {"p1": None, "p2": None}, tags={"p1": "a", "p2": "b"})
    # leave-one-out majorities: p1 → qwen: tie, internvl: tie, gemma: 1 (its share 0);
    #                           p2 → qwen: 6 (its share 0), internvl: tie, gemma: tie
    values = sup.trackers["agreement"].values
    assert values == {"": [0.0, None, 0.0], "tag:a": [None, None, 0.0], "tag:b": [0.0, None, None]}
    assert sup.trackers["agreement"].get("a") == [0.0, None, 0.0]  # qwen has no tag-a estimate: overall


def test_an_agent_that_copies_a_peer_never_votes_itself_a_label():
    """Agents 1 and 2 always disagree; agent 0 copies agent 1. Estimated from every answer, Dawid–Skene rates
    agents 0 and 1 ≈ 1 and agent 2 ≈ 0, and agent 0's label would be its own answer (reward 1 every time).
    Estimated without agent 0's answers, its two supervisors are indistinguishable: a tie, as with uniform votes."""
    from corl_vl.rewards.supervision import Supervision
    from corl_vl.rewards.topology import all_peers

    names = ["copier", "a", "b"]
    raw = {"agents": [{"name": n, "model": "m"} for n in names], "reward": {"topology": "all_peers"}}
    ids = [f"p{k}" for k in range(6)]
    answers = {
        "copier": {p: [str(k)] * 4 for k, p in enumerate(ids)},
        "a": {p: [str(k)] * 4 for k, p in enumerate(ids)},
        "b": {p: [str(k + 10)] * 4 for k, p in enumerate(ids)},
    }
    choices = dict.fromkeys(ids)
    for weighting in ("uniform", "agreement", "dawid_skene"):
        cfg = config_from_dict({**raw, "reward": {**raw["reward"], "weighting": weighting}})
        supervision = Supervision(cfg.reward, all_peers(3), names)
        rewards, labels = supervision.step(answers, ids, choices)
        assert set(labels["copier"].values()) == {None}, weighting
        assert all(r == [0.0] * 4 for r in rewards["copier"].values()), weighting
        assert labels["b"] == {p: str(k) for k, p in enumerate(ids)}  # its two supervisors agree
    logged = supervision.metrics  # the logged estimate still reads every answer
    assert logged["copier"]["reliability/dawid_skene"] > 0.99 > 0.01 > logged["b"]["reliability/dawid_skene"]
    state = supervision.state_dict()
    restored = Supervision(cfg.reward, all_peers(3), names)
    restored.load_state_dict(state)
    assert restored.state_dict() == state
