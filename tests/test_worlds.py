"""The 1-GPU pair's layout, run on the CPU: two processes, one agent each, each in its own world, sharing one
(simulated) GPU and taking turns, against the one-process cohort of the same config and seeds.

``CORL_VL_NODE_GPUS=1`` is the injected device list: both processes are placed on "GPU 0" and must take turns,
while computing on the CPU. Each agent's world is built on a backend with NCCL's device rule (CUDA tensors only),
so a CPU tensor sent into it — a stop vote, a barrier, an answer exchange as on the old single world — fails the
run. The launch is 1 step, then ``--resume`` to step 2; the reference is one process running 2 steps.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from test_distributed import _launch, _records, assert_some_label, one_thread

TIME = ("time/",)


def _turns(path: Path) -> list[tuple[str, int, str]]:
    return [
        (w, int(r), label) for w, r, label in (line.split(" ", 2) for line in path.read_text().splitlines())
    ]


def _check_turns(entries: list[tuple[str, int, str]], steps: range) -> None:
    """Strictly one process inside a turn at a time, each turn in the fixed order: rank 0, then rank 1."""
    inside = None
    for what, rank, label in entries:
        if what == "enter":
            assert inside is None, f"rank {rank} entered {label!r} while rank {inside} was active"
            inside = rank
        else:
            assert inside == rank
            inside = None
    entered = [(rank, label) for what, rank, label in entries if what == "enter"]
    want = [(r, "build") for r in (0, 1)]
    for step in steps:
        want += [(r, f"{phase} {step}") for phase in ("rollout", "update") for r in (0, 1)]
    assert entered == want


@pytest.mark.distributed
def test_the_one_gpu_pair_takes_turns_and_resumes_bit_identical_to_the_one_process_cohort(tmp_path):
    from dist_worker import CUDA_ONLY, run_worker

    dist_out, single_out = tmp_path / "dist", tmp_path / "single"
    dist_out.mkdir()
    single_out.mkdir()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "CORL_VL_NODE_GPUS": "1"}
    common = ("--deepspeed", "none", "--backend", CUDA_ONLY, "--turns-log")
    _launch(
        dist_out, *common, str(tmp_path / "turns-1.log"), "--max-steps", "1", "--save-every", "1", env=env
    )
    _launch(dist_out, *common, str(tmp_path / "turns-2.log"), "--max-steps", "2", "--resume", env=env)
    with one_thread():
        reference = {r["agent"]: r for r in run_worker(single_out, None, max_steps=2, save_every=1)}

    _check_turns(_turns(tmp_path / "turns-1.log"), range(0, 1))
    _check_turns(_turns(tmp_path / "turns-2.log"), range(1, 2))
    for rank, agent in ((0, "qwen"), (1, "llama")):
        first = json.loads((dist_out / f"rank-{rank}.json").read_text())[0]
        resumed = json.loads((dist_out / f"rank-{rank}-resumed.json").read_text())[0]
        assert first["agent"] == resumed["agent"] == agent and not first["deepspeed"]
        want = reference[agent]
        # every process received every agent's answers and computed the same labels and rewards
        assert first["steps"] + resumed["steps"] == want["steps"]
        assert first["rewards"] + resumed["rewards"] == [{agent: r[agent]} for r in want["rewards"]]
        for step in ("step-000001", "step-000002"):
            a = load_file(str(dist_out / "run" / "checkpoints" / step / agent / "model.safetensors"))
            b = load_file(str(single_out / "run" / "checkpoints" / step / agent / "model.safetensors"))
            assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), (agent, step)
        assert first["sampled"] + resumed["sampled"] == want["sampled"]
        got, ref = _records(dist_out / "run", agent), _records(single_out / "run", agent)
        assert [{k: v for k, v in r.items() if not k.startswith(TIME)} for r in got] == [
            {k: v for k, v in r.items() if not k.startswith(TIME)} for r in ref
        ]
    assert_some_label(reference["qwen"]["steps"])


@pytest.mark.distributed
@pytest.mark.vllm
def test_vllm_engines_sharing_a_gpu_start_and_wake_only_in_their_process_turn(tmp_path):
    """vLLM's rules (one engine per process, start-up needs its share free, no sync beside the KV cache) over the
    2-process layout: with turns both engines start, generate and sync; without them the second engine's start
    finds the first one awake and fails, as on a GPU."""
    out = tmp_path / "turns"
    out.mkdir()
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    args = (
        "--deepspeed",
        "none",
        "--engine",
        "vllm",
        "--max-steps",
        "2",
        "--strict-vllm",
        str(tmp_path / "ledger"),
        "--gpu-memory-utilization",
        "0.6",  # two awake engines do not fit on the device
    )
    _launch(out, *args, "--turns-log", str(tmp_path / "turns.log"), env={**env, "CORL_VL_NODE_GPUS": "1"})
    _check_turns(_turns(tmp_path / "turns.log"), range(0, 2))
    for rank in (0, 1):
        (record,) = json.loads((out / f"rank-{rank}.json").read_text())
        assert record["engine"] == "VLLMEngine" and record["syncs"] >= 1 and len(record["sampled"]) == 2

    alone = tmp_path / "no-turns"
    alone.mkdir()
    said: list[str] = []
    with pytest.raises(AssertionError):
        # each process thinks it has the GPU to itself; the rank left running stops at torchrun's SIGTERM (a
        # graceful stop would finish its step first, and torchrun waits 30 s for it)
        _launch(alone, *args, "--stop-at-once", env=env, timeout=300, output=said)
    # the first engine to start holds its share; the second one's start finds too little free (its error line
    # can be anywhere in the output: the launcher then stops the other process)
    assert "Free memory" in "".join(said)
