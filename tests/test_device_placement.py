"""One-node placement (corl_vl/train/device_placement.py): own devices or blocks when G ≥ N, shared devices taken
in turns when G < N, agents[i].devices overrides, the CPU without a GPU, bad device names in one line."""

from __future__ import annotations

import pytest

from corl_vl.config import config_from_dict
from corl_vl.config_checks import normalise_device
from corl_vl.errors import CorlError
from corl_vl.train.device_placement import place_agents

GPUS4 = ["cuda:0", "cuda:1", "cuda:2", "cuda:3"]


def test_each_agent_its_own_device_or_block_when_there_are_enough():
    two = place_agents(["a", "b"], [None, None], GPUS4[:2])
    assert two.devices == [["cuda:0"], ["cuda:1"]]
    assert two.lanes() == [[0], [1]] and not two.shared and two.leftover == []
    blocks = place_agents(["a", "b"], [None, None], GPUS4)
    assert blocks.devices == [["cuda:0", "cuda:1"], ["cuda:2", "cuda:3"]]
    assert [blocks.home(0), blocks.home(1)] == ["cuda:0", "cuda:2"]
    uneven = place_agents(["a", "b"], [None, None], GPUS4[:3])  # 3 // 2 = 1 each, one left over
    assert uneven.devices == [["cuda:0"], ["cuda:1"]] and uneven.leftover == ["cuda:2"]
    assert "no agent uses cuda:2" in uneven.lines()[-1]


def test_fewer_devices_than_agents_share_them_in_turns():
    one = place_agents(["a", "b"], [None, None], ["cuda:0"])
    assert one.devices == [["cuda:0"], ["cuda:0"]]
    assert one.lanes() == [[0, 1]] and one.shared
    assert one.takes_turns(0) == [1] and one.takes_turns(1) == [0]
    assert "takes turns with b" in one.lines()[0]
    three = place_agents(["a", "b", "c"], [None, None, None], GPUS4[:2])  # round-robin
    assert three.devices == [["cuda:0"], ["cuda:1"], ["cuda:0"]]
    assert three.lanes() == [[0, 2], [1]] and three.takes_turns(1) == []


def test_no_gpu_puts_every_agent_on_the_cpu_without_turns():
    cpu = place_agents(["a", "b"], [None, None], [])
    assert cpu.devices == [["cpu"], ["cpu"]]
    assert cpu.lanes() == [[0], [1]] and not cpu.shared  # host memory: agents keep overlapping


def test_overrides_win_and_the_others_take_the_devices_left():
    pinned = place_agents(["a", "b", "c"], [["cuda:1"], None, None], GPUS4[:3])
    assert pinned.devices == [["cuda:1"], ["cuda:0"], ["cuda:2"]]
    assert not pinned.shared
    # every device named by an override: the others are placed over all of them, and take turns
    full = place_agents(["a", "b", "c"], [["cuda:0"], ["cuda", "cuda:1"], None], GPUS4[:2])
    assert full.devices == [["cuda:0"], ["cuda:0", "cuda:1"], ["cuda:0"]]
    assert full.lanes() == [[0, 1, 2]]
    host = place_agents(["a", "b"], [["cpu"], None], ["cuda:0"])  # a cpu override is host memory, no turns
    assert host.devices == [["cpu"], ["cuda:0"]] and host.lanes() == [[0], [1]]


def test_bad_device_names_fail_in_one_line_naming_the_key():
    with pytest.raises(
        CorlError, match=r"agents\.0\.devices: cuda:5 is not a visible device \(visible: cuda:0"
    ):
        place_agents(["a", "b"], [["cuda:5"], None], GPUS4[:2])
    with pytest.raises(
        CorlError, match=r"agents\.1\.devices: cuda:0 is not a visible device \(visible: none"
    ):
        place_agents(["a", "b"], [None, ["cuda:0"]], [])
    assert [normalise_device(d) for d in ("cpu", "cuda", "cuda:3", "gpu0", "cuda:x")] == [
        "cpu",
        "cuda:0",
        "cuda:3",
        None,
        None,
    ]
    raw = {"agents": [{"model": "tiny-qwen2.5"}, {"model": "tiny-qwen3"}]}
    for devices, message in (
        (["gpu0"], "'gpu0' is not a device name; use cpu, cuda or cuda:N"),
        ([], "an empty list"),
        (["cpu", "cuda:0"], "cpu cannot be part of a block"),
        (["cuda:0", "cuda"], "names a device twice"),
    ):
        raw["agents"][1]["devices"] = devices
        with pytest.raises(CorlError, match=r"^agents\.1\.devices: ") as err:
            config_from_dict(raw)
        assert message in str(err.value) and "\n" not in str(err.value)


def test_a_vllm_agent_on_another_gpu_than_the_process_s_is_refused_in_one_line():
    from corl_vl.train.agent_rollout import check_vllm_device

    check_vllm_device("qwen", 0, 0)  # one process, first GPU: the engine lands beside the model
    check_vllm_device("qwen", 1, 1)  # a rank whose current device is its own GPU
    with pytest.raises(CorlError, match=r"agent internvl: trains on cuda:1, but vLLM .* on cuda:0") as err:
        check_vllm_device("internvl", 1, 0)
    assert "rollout.engine: hf" in str(err.value) and "\n" not in str(err.value)
