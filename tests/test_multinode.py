"""Several "nodes" on one machine: torchrun's node arguments (``--nnodes 2 --node_rank i``, gloo) run a cohort
whose agents have different group sizes, placed node by node, and the result equals a one-node launch.

The commands are the ones ``corl-vl launch`` prints (:func:`corl_vl.cli.launch.torchrun_command`), running
tests/dist_worker.py instead of ``corl-vl train`` (the worker controls what the random tiny models answer).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from test_distributed import one_thread
from torchrun_launch import free_port as _free_port

from corl_vl.cli.launch import torchrun_command

TESTS = Path(__file__).resolve().parent
ZERO3 = str(TESTS.parent / "configs" / "deepspeed" / "zero3.json")
TORCHRUN = [sys.executable, "-m", "torch.distributed.run"]


def launch_nodes(
    nproc: list[int], *args: str, env: dict, timeout: float = 600
) -> list[subprocess.CompletedProcess]:
    """Every node's torchrun at once (one session each, so a hang is stopped by killing those sessions only)."""
    port = _free_port()
    worker = [str(TESTS / "dist_worker.py"), *args]
    procs = [
        subprocess.Popen(
            TORCHRUN + torchrun_command(nproc, node, "127.0.0.1", port, worker)[1:],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        for node in range(len(nproc))
    ]
    results = []
    try:
        for proc in procs:
            out, err = proc.communicate(timeout=timeout)
            results.append(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
    except subprocess.TimeoutExpired:
        for proc in procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        pytest.fail(f"{len(nproc)}-node run hung for {timeout} s")
    return results


def _ok(results: list[subprocess.CompletedProcess]) -> None:
    for r in results:
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-5000:]


@pytest.mark.distributed
def test_two_node_uneven_cohort_resumes_and_matches_the_one_node_launch(tmp_path):
    """qwen on 3 ranks, llama on 1, ZeRO-3, 4 problems a step (qwen's shares 2, 1, 1): 2 "nodes" x 2 processes
    train 2 steps, save, resume to 3; a 1-node launch of 4 processes runs the same 3 steps. Labels and rewards
    are bit-equal on every rank and between the two launches; a resume on another world size is refused."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TORCH_EXTENSIONS_DIR": str(tmp_path / "ext")}
    common = ["--deepspeed", ZERO3, "--gpus", "3,1", "--problems-per-step", "4"]
    nodes, single = tmp_path / "nodes", tmp_path / "single"
    started = launch_nodes([2, 2], str(nodes), *common, "--max-steps", "2", "--save-every", "2", env=env)
    _ok(started)
    # the plan, printed by global rank 0 (on node 0) at start
    assert "corl-vl: placement: 2 agents on 2 node(s), 4 GPU(s)" in started[0].stderr
    assert "corl-vl:   qwen: 3 GPU(s), ranks 0-2, node(s) 0, 1" in started[0].stderr
    _ok(launch_nodes([2, 2], str(nodes), *common, "--max-steps", "3", "--resume", env=env))
    _ok(launch_nodes([4], str(single), *common, "--max-steps", "3", env=env))

    placement = yaml.safe_load((nodes / "run" / "config.yaml").read_text())["placement"]
    assert placement["nodes"] == [[0, 1], [2, 3]]  # from torchrun's node ranks, not from one host
    # qwen is larger than a node: node 0 whole, its third rank on node 1, where llama fills the last GPU
    assert placement["agents"] == {"qwen": [0, 1, 2], "llama": [3]} and placement["leftover"] == []
    one_node = yaml.safe_load((single / "run" / "config.yaml").read_text())["placement"]
    assert one_node["nodes"] == [[0, 1, 2, 3]] and one_node["agents"] == placement["agents"]

    def ranks(out: Path) -> list[dict]:
        return [json.loads((out / f"rank-{r}.json").read_text())[0] for r in range(4)]

    first, resumed = (
        ranks(nodes),
        [json.loads((nodes / f"rank-{r}-resumed.json").read_text())[0] for r in range(4)],
    )
    reference = ranks(single)
    for a, b, ref in zip(first, resumed, reference):
        assert a["group_ranks"] == ref["group_ranks"] and a["changed_tensors"] > a["tensors"] // 2, a
        assert a["steps"] + b["steps"] == ref["steps"]  # every agent's answer ids and the labels, 3 steps
        assert a["rewards"] + b["rewards"] == ref["rewards"]  # this rank's share, bit-equal
        assert ref["steps"] == reference[0]["steps"]  # labels identical on every rank
    assert [len(r["rewards"][0][r["agent"]]) for r in reference] == [2, 1, 1, 4]  # uneven shares
    assert any(
        label is not None
        for step in reference[0]["steps"]
        for lab in step["labels"].values()
        for label in lab.values()
    )

    refused = launch_nodes([2], str(nodes), *common[:2], "--max-steps", "3", "--resume", env=env)
    assert all(r.returncode != 0 for r in refused)
    assert "is not re-sharded onto another world size" in refused[0].stderr


@pytest.mark.distributed
def test_a_tensor_parallel_group_rolls_out_its_share_once_and_each_rank_trains_its_part(tmp_path):
    """One agent on 2 ranks with rollout.tensor_parallel_size=2: both ranks form one TP group, so both generate
    the whole step with the same seeds (HF engine here; vLLM would shard the model over them), then each keeps
    its half for the update. Its rollouts are therefore exactly the single-process run's: same answers, and
    the two ranks' rewards and labels together are the single process's."""
    from dist_worker import run_worker

    env = {**os.environ, "OMP_NUM_THREADS": "1", "TORCH_EXTENSIONS_DIR": str(tmp_path / "ext")}
    args = ["--solo", "--tp", "2", "--max-steps", "1", "--problems-per-step", "4"]
    _ok(launch_nodes([2], str(tmp_path), *args, env=env))
    (tmp_path / "single").mkdir()
    with one_thread():
        (reference,) = run_worker(tmp_path / "single", max_steps=1, solo=True, problems_per_step=4)
    ranks = [json.loads((tmp_path / f"rank-{r}.json").read_text())[0] for r in (0, 1)]
    (ref_step,) = reference["steps"]
    (ref_rewards,) = reference["rewards"]
    assert len(ref_rewards["qwen"]) == 4 and len({r for rs in ref_rewards["qwen"].values() for r in rs}) > 1
    for rec in ranks:
        assert rec["group_ranks"] == [0, 1] and rec["changed_tensors"] > rec["tensors"] // 2, rec
        assert rec["steps"][0]["answer_ids"] == ref_step["answer_ids"]
        assert len(rec["rewards"][0]["qwen"]) == 2  # its half of the TP group's share
    assert {**ranks[0]["rewards"][0]["qwen"], **ranks[1]["rewards"][0]["qwen"]} == ref_rewards["qwen"]
    labels = [r["steps"][0]["labels"]["qwen"] for r in ranks]
    assert {**labels[0], **labels[1]} == ref_step["labels"]["qwen"]
