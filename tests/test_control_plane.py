"""The GPU process model's rules, checked on the CPU: the control plane carries JSON only, the votes that stop a
run never put a tensor into a collective, tensor collectives get the device their backend serves, and processes
sharing a GPU take turns one at a time.

NCCL itself is not here, so its rule is: a backend registered for CUDA only (``devices=["cuda"]``, gloo inside),
which refuses a CPU tensor exactly as NCCL does ("No backend type associated with device type cpu").
"""

from __future__ import annotations

import datetime
import threading

import pytest
import torch
import torch.distributed as dist

from corl_vl.errors import CorlError
from corl_vl.train.control_plane import ControlPlane
from corl_vl.train.deepspeed_setup import collective_device
from corl_vl.train.device_turns import DeviceTurns
from corl_vl.train.distributed import DistContext, device_slots, node_gpu_count, pin_gpu

CUDA_ONLY = "corl_vl_cuda_only"


def _cuda_only_backend() -> None:
    if CUDA_ONLY not in dist.Backend.backend_capability:
        dist.Backend.register_backend(
            CUDA_ONLY,
            lambda store, rank, size, timeout: dist.ProcessGroupGloo(store, rank, size, timeout),
            devices=["cuda"],
        )


@pytest.fixture
def cuda_only_group():
    """A one-process group with NCCL's device rule (CUDA tensors only), beside whatever default group this
    process already has (an in-process vLLM engine leaves one)."""
    _cuda_only_backend()
    created = not dist.is_initialized()
    if created:
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield dist.new_group([0], backend=CUDA_ONLY)
    finally:
        if created:
            dist.destroy_process_group()


def _together(n: int, fn) -> list:
    """``fn(rank)`` in ``n`` threads at once (processes of a cohort, sharing one store); results by rank."""
    out: list = [None] * n
    errors: list = []

    def run(rank: int) -> None:
        try:
            out[rank] = fn(rank)
        except BaseException as err:  # re-raised in the test's thread
            errors.append(err)

    threads = [threading.Thread(target=run, args=(r,)) for r in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    if errors:
        raise errors[0]
    return out


def test_the_control_plane_gathers_json_in_rank_order_and_cleans_up_behind_itself():
    store = dist.HashStore()
    planes = [ControlPlane(store, r, 3) for r in range(3)]

    def three_exchanges(rank: int) -> list:
        plane = planes[rank]
        got = [plane.all_gather({"rank": rank, "answers": ["1", None]}) for _ in range(2)]
        return [*got, plane.any(rank == 2)]

    first, second, vote = _together(3, three_exchanges)[0]
    assert first == second == [{"rank": r, "answers": ["1", None]} for r in range(3)]
    assert vote is True  # one process's flag stops everyone
    assert (
        store.num_keys() <= 3 + 1
    )  # the last exchange's keys (and the store's own counter) are all that is left


def test_the_control_plane_refuses_a_tensor_in_one_line():
    plane = ControlPlane(dist.HashStore(), 0, 1)
    with pytest.raises(CorlError, match=r"control plane: the flag is not plain data .* never tensors"):
        plane.all_gather(torch.tensor([1.0]), "the flag")


def test_a_missing_peer_is_named_after_the_timeout_not_a_hang():
    plane = ControlPlane(dist.HashStore(), 0, 2, timeout=datetime.timedelta(seconds=0.2))
    with pytest.raises(CorlError, match=r"waited .* at exchange 0 \(the step's answers\)"):
        plane.all_gather([], "the step's answers")


def test_a_cpu_tensor_into_a_cuda_only_group_fails_as_nccl_does(cuda_only_group):
    """The rule every tensor collective of an agent's world follows on GPUs."""
    with pytest.raises(RuntimeError, match="No backend type associated with device type cpu"):
        dist.all_reduce(torch.tensor([1.0]), group=cuda_only_group)


def test_collectives_take_the_device_their_backend_serves(cuda_only_group, monkeypatch):
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 3)
    assert collective_device(cuda_only_group) == torch.device("cuda", 3)  # NCCL-like: this process's GPU
    gloo = dist.new_group([0], backend="gloo")
    assert collective_device(gloo) == torch.device("cpu")


def test_stop_votes_of_a_multi_process_run_never_send_a_tensor_into_a_collective(tmp_path, monkeypatch):
    """Non-finite, stall and signal votes go through the control plane. On the old single world they were CPU
    tensors all-reduced over NCCL, which ended every GPU run at the end of step 1: here every collective
    raises, as NCCL would for those tensors."""
    from corl_vl.train.callbacks import StallDetection
    from corl_vl.train.interrupts import StopRequest
    from corl_vl.train.nonfinite import NonFiniteStop

    def refuse(*args, **kwargs):
        raise AssertionError("a collective was called for a stop vote")

    for name in ("all_reduce", "all_gather_object", "broadcast", "barrier", "all_gather"):
        monkeypatch.setattr(dist, name, refuse)
    ctx = DistContext(0, 1, [[0]], 0, None, None, control=ControlPlane(dist.HashStore(), 0, 1))

    class Run:
        metrics = {"a": {"update/nonfinite": 0.0}}
        step_index = 0
        completed = 1
        status = None

    NonFiniteStop(tmp_path, dist=ctx).on_step_end(Run())
    assert StallDetection(5, dist=ctx).stop_reason() is None
    with StopRequest(ctx) as stop:
        assert stop.should_stop() is False


def test_processes_take_their_gpu_round_robin_and_share_it_when_there_are_fewer_gpus():
    assert device_slots([[0, 1, 2, 3]], 8) == {r: (f"node0-gpu{r}", r) for r in range(4)}
    assert device_slots([[0, 1]], 1) == {0: ("node0-gpu0", 0), 1: ("node0-gpu0", 0)}  # the 1-GPU pair
    three = device_slots([[0, 1, 2], [3, 4]], 2)
    assert [three[r][0] for r in range(5)] == [
        "node0-gpu0",
        "node0-gpu1",
        "node0-gpu0",
        "node1-gpu0",
        "node1-gpu1",
    ]
    assert device_slots([[0, 1]], 0) == {}  # CPU: nothing to share
    assert node_gpu_count({"CORL_VL_NODE_GPUS": "2"}) == 2
    with pytest.raises(CorlError, match="CORL_VL_NODE_GPUS='two'"):
        node_gpu_count({"CORL_VL_NODE_GPUS": "two"})


def test_a_process_sees_only_its_gpu_as_cuda_0():
    env = {"CUDA_VISIBLE_DEVICES": "4,5,6,7", "LOCAL_RANK": "3"}
    pin_gpu(2, env)
    assert env == {"CUDA_VISIBLE_DEVICES": "6", "LOCAL_RANK": "0"}  # vLLM builds on cuda:LOCAL_RANK
    env = {}
    pin_gpu(1, env)
    assert env == {"CUDA_VISIBLE_DEVICES": "1", "LOCAL_RANK": "0"}


def test_processes_on_one_gpu_take_turns_one_at_a_time_in_a_fixed_order():
    store, log, lock = dist.HashStore(), [], threading.Lock()
    inside = {"now": 0, "most": 0}

    def member(rank: int) -> None:
        turns = DeviceTurns(store, "node0-gpu0", [0, 1], rank)
        for step in range(3):
            for phase in ("rollout", "update"):
                with turns.turn(f"{phase} {step}"):
                    with lock:
                        inside["now"] += 1
                        inside["most"] = max(inside["most"], inside["now"])
                        log.append((rank, phase, step))
                    with lock:
                        inside["now"] -= 1

    _together(2, member)
    assert inside["most"] == 1  # never two processes active on the GPU
    expected = [(r, phase, step) for step in range(3) for phase in ("rollout", "update") for r in (0, 1)]
    assert log == expected


def test_a_failed_turn_still_passes_the_baton_and_a_turn_inside_a_turn_is_refused():
    store = dist.HashStore()
    first = DeviceTurns(store, "gpu", [0, 1], 0)
    with pytest.raises(ValueError), first.turn("rollout 0"):
        raise ValueError("the engine failed")
    second = DeviceTurns(store, "gpu", [0, 1], 1, timeout=datetime.timedelta(seconds=5))
    with second.turn("rollout 0"):  # would wait for the timeout if the baton had been lost
        pass
    with (
        pytest.raises(CorlError, match="inside the turn for 'update 0'"),
        first.turn("update 0"),
        first.turn("update 0 again"),
    ):
        pass
