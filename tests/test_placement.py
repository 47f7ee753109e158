"""Placement rules (corl_vl.train.rank_placement), one test each, on simulated clusters: pure rank arithmetic."""

from __future__ import annotations

import pytest

from corl_vl.errors import CorlError
from corl_vl.train.distributed import DistContext, share
from corl_vl.train.rank_placement import gpu_counts, nodes_from_ranks, place, simulated_nodes

TWO_BY_EIGHT = simulated_nodes(2, 8)  # node 0: ranks 0-7, node 1: ranks 8-15


def test_six_six_four_on_two_by_eight_keeps_what_fits_on_one_node_and_reports_the_rest():
    plan = place([6, 6, 4], TWO_BY_EIGHT, names=["a", "b", "c"])
    assert plan.groups[0] == [0, 1, 2, 3, 4, 5]  # node 0
    assert plan.groups[1] == [8, 9, 10, 11, 12, 13]  # node 1
    assert plan.groups[2] == [6, 7, 14, 15]  # 2 free on each node: no node holds 4
    assert [plan.nodes_of(i) for i in range(3)] == [[0], [1], [0, 1]]
    assert plan.spread == ["c"] and plan.leftover == []
    text = "\n".join(plan.lines())
    assert "c spans nodes" in text and "a: 6 GPU(s), ranks 0-5, node(s) 0" in text


def test_an_agent_that_fits_in_a_node_goes_to_the_node_with_least_room_that_holds_it():
    plan = place([4, 2, 6], TWO_BY_EIGHT)  # largest first: c on node 0, a on node 1
    assert plan.groups == [
        [8, 9, 10, 11],
        [6, 7],
        [0, 1, 2, 3, 4, 5],
    ]  # b fills node 0's gap of 2, not node 1's 4
    assert plan.spread == [] and plan.leftover == [12, 13, 14, 15]


def test_an_agent_that_fits_the_largest_node_is_not_split_over_smaller_ones():
    plan = place([7, 6], [[0, 1, 2, 3, 4, 5, 6, 7], [8, 9, 10, 11, 12, 13]])  # nodes of 8 and 6 processes
    assert plan.groups == [[0, 1, 2, 3, 4, 5, 6], [8, 9, 10, 11, 12, 13]] and plan.spread == []
    plan = place([6, 4], [list(range(8)), [8, 9]])  # 4 fits in node 0 by size, but only 2 are free there
    assert plan.groups[1] == [6, 7, 8, 9] and plan.spread == ["agent 1"]


def test_an_agent_larger_than_a_node_gets_whole_nodes_then_its_rest_on_one_node():
    plan = place([2, 12], simulated_nodes(3, 8))
    assert plan.groups[1] == list(range(12))  # node 0 whole, 4 of node 1
    assert plan.groups[0] == [12, 13]  # the small agent shares node 1 only, never the big agent's whole node
    assert plan.leftover == [14, 15, *range(16, 24)]
    assert plan.lines()[-1] == "  leftover: 10 GPU(s) unused (node 1: 2, node 2: 8)"


def test_leftover_gpus_are_reported_per_node_and_counted_out_of_the_launch():
    plan = place([6, 6, 2], TWO_BY_EIGHT)
    assert plan.groups == [[0, 1, 2, 3, 4, 5], list(range(8, 14)), [6, 7]]
    assert plan.leftover == [14, 15] and plan.used_per_node() == [8, 6]
    assert plan.to_dict()["leftover"] == [14, 15]
    with pytest.raises(CorlError, match=r"use 14 of the 16 processes; ranks \[14, 15\] would sit idle"):
        plan.refuse_idle()  # what every rank of such a launch says at start
    place([6, 6, 4], TWO_BY_EIGHT).refuse_idle()


def test_default_is_an_equal_share_of_what_explicit_agents_leave():
    assert gpu_counts([None, None, None], 16) == [6, 5, 5]
    assert gpu_counts([None, 10, None], 16) == [3, 10, 3]
    assert gpu_counts([None, None], 8, tp=2) == [4, 4]
    assert gpu_counts([None, None, None], 8, tp=2) == [4, 2, 2]  # units of 2
    plan = place([None, None], [[0, 1], [2, 3]])  # one agent per simulated node
    assert plan.groups == [[0, 1], [2, 3]]
    with pytest.raises(CorlError, match=r"agents\.2\.gpus: no GPU left"):
        gpu_counts([None, None, None], 2)
    with pytest.raises(CorlError, match="ask for 18 GPUs, the launch has 16"):
        gpu_counts([10, 8], 16)


def test_uneven_blocks_give_each_agent_its_own_group_size_and_data_shares():
    plan = place([3, 1], [[0, 1], [2, 3]], names=["qwen", "llama"])  # 2 "nodes" x 2 processes
    assert plan.groups == [[0, 1, 2], [3]]
    ids = ["p0", "p1", "p2"]
    shares = [DistContext(r, 4, plan.groups, 0, None, None, plan).my_share(ids) for r in (0, 1, 2)]
    assert shares == [["p0"], ["p1"], ["p2"]]  # the 3-rank agent splits the step three ways
    assert DistContext(3, 4, plan.groups, 1, None, None, plan).my_share(ids) == ids  # its peer does all of it


def test_tensor_parallel_groups_are_aligned_consecutive_ranks_inside_one_node():
    plan = place([4, 8, 4], TWO_BY_EIGHT, tensor_parallel_size=2)
    assert plan.groups == [[8, 9, 10, 11], list(range(0, 8)), [12, 13, 14, 15]]  # b: a whole node
    assert plan.tp_groups(1) == [[0, 1], [2, 3], [4, 5], [6, 7]]
    for i in range(3):  # vLLM's external_launcher forms TP groups from consecutive ranks k*T … k*T+T-1
        for group in plan.tp_groups(i):
            assert group[0] % 2 == 0 and group == list(range(group[0], group[0] + 2))
            assert len({plan.node_of(r) for r in group}) == 1
    # rollout: one share per TP group (both members generate it); training: each member's half of it
    ids = [f"p{i}" for i in range(8)]
    ctx = [DistContext(r, 16, plan.groups, 1, None, None, plan) for r in range(0, 8)]
    assert [c.rollout_share(ids) for c in ctx[:2]] == [["p0", "p1"], ["p0", "p1"]]
    assert [c.my_share(ids) for c in ctx] == [[p] for p in ids]
    with pytest.raises(CorlError, match="not a positive multiple"):
        place([3, 1], [[0, 1], [2, 3]], tensor_parallel_size=2)
    with pytest.raises(CorlError, match="not 2 consecutive ranks"):  # a launcher that interleaves nodes
        place([None], [[0, 2], [1, 3]], tensor_parallel_size=2)
    with pytest.raises(CorlError, match="node 0 runs 3 process"):
        place([None], [[0, 1, 2]], tensor_parallel_size=2)


def test_nodes_come_from_each_ranks_node_id_and_shares_are_contiguous():
    assert nodes_from_ranks(["0", "0", "1", "1"]) == [[0, 1], [2, 3]]
    assert nodes_from_ranks(["b", "a", "b"]) == [[0, 2], [1]]
    ids = [f"p{i}" for i in range(5)]
    assert [share(ids, r, 2) for r in range(2)] == [["p0", "p1", "p2"], ["p3", "p4"]]
