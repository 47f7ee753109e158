"""Topologies: supervisor sets for N = 2, 3, 4 and validation."""

from __future__ import annotations

from pathlib import Path

import pytest

from corl_vl.errors import CorlError
from corl_vl.rewards.topology import all_peers, from_config, from_edges, mutual, ring


def sets(t) -> list[tuple[int, ...]]:
    return [t.supervisors(i) for i in range(t.n_agents)]


def test_mutual_n2() -> None:
    assert sets(mutual()) == [(1,), (0,)]
    assert sets(ring(2)) == sets(mutual()) == sets(all_peers(2))


def test_ring_agent_i_supervised_by_next() -> None:
    assert sets(ring(3)) == [(1,), (2,), (0,)]
    assert sets(ring(4)) == [(1,), (2,), (3,), (0,)]
    assert ring(4).supervisees(0) == (3,)


def test_all_peers() -> None:
    assert sets(all_peers(3)) == [(1, 2), (0, 2), (0, 1)]
    assert sets(all_peers(4)) == [(1, 2, 3), (0, 2, 3), (0, 1, 3), (0, 1, 2)]


def test_from_edges_direction_is_supervisor_to_agent() -> None:
    t = from_edges(3, [(1, 0), (2, 0), (0, 1), (0, 2)])
    assert sets(t) == [(1, 2), (0,), (0,)]
    assert t.edges == [(1, 0), (2, 0), (0, 1), (0, 2)]


def test_from_config_forms() -> None:
    assert sets(from_config("mutual", 2)) == [(1,), (0,)]
    assert sets(from_config("ring", 3)) == [(1,), (2,), (0,)]
    assert sets(from_config("all_peers", 3)) == [(1, 2), (0, 2), (0, 1)]
    assert sets(from_config([[2], [0, 2], [1]], 3)) == [(2,), (0, 2), (1,)]
    graph = {"graph": {"alice": ["bob"], "bob": "carol", "carol": ["alice", "bob"]}}
    names = ["alice", "bob", "carol"]
    assert sets(from_config(graph, 3, agent_names=names)) == [(1,), (2,), (0, 1)]
    assert sets(from_config({"graph": {"0": [1], 1: [0]}}, 2)) == [(1,), (0,)]  # YAML keys may be strings


@pytest.mark.parametrize(
    ("spec", "n", "message"),
    [
        ("mutual", 3, "needs exactly 2 agents"),
        ("star", 3, "unknown topology 'star'"),
        ({"graph": {0: [0], 1: [0]}}, 2, "agent 0 supervises itself"),
        ({"graph": {0: [1]}}, 2, "agent 1 has no supervisor"),
        ({"graph": {0: [5], 1: [0]}}, 2, "agent index 5 is not in 0..1"),
        ({"graph": {0: ["dave"], 1: [0]}}, 2, "unknown agent 'dave'"),
        ({"graph": {0: [1, 1], 1: [0]}}, 2, "lists a supervisor twice"),
        ({"edges": []}, 2, "must be {'graph'"),
        ([[1]], 2, "1 supervisor lists for 2 agents"),
        ("ring", 1, "at least 2 agents"),
    ],
)
def test_validation(spec, n: int, message: str) -> None:
    with pytest.raises(CorlError, match=message):
        from_config(spec, n)


def test_a_graph_that_leaves_an_agent_unsupervised_is_refused_before_models_load(tmp_path):
    """Options sweep row reward.topology=graph: the cohort's own topology check, run at config time."""
    from corl_vl.config import load_config

    demo = Path(__file__).parents[1] / "configs/demo.yaml"
    with pytest.raises(CorlError, match=r"reward\.edges: topology 'graph': agent 0 has no supervisor"):
        load_config(demo, overrides=["reward.topology=graph"])
    with pytest.raises(CorlError, match=r"reward\.edges: .*no supervisor"):
        load_config(demo, overrides=["reward.topology=graph", "reward.edges={qwen: [internvl]}"])
    cfg = load_config(
        demo, overrides=["reward.topology=graph", "reward.edges={qwen: [internvl], internvl: [qwen]}"]
    )
    assert cfg.reward.edges == {"qwen": ["internvl"], "internvl": ["qwen"]}
