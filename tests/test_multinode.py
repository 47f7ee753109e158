"""Several "nodes" on one machine: torchrun's node arguments (``--nnodes 3 --node_rank i``, gloo) run a cohort
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

from corl_vl import recipe
from corl_vl.cli.launch import torchrun_command
from corl_vl.config import config_from_dict
from corl_vl.errors import CorlError
from corl_vl.train.resume_check import read_run_config

TESTS = Path(__file__).resolve().parent
sys.path.insert(0, str(TESTS.parent / "benchmarks" / "gpu"))
import checks_dist  # noqa: E402

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
def test_three_node_uneven_cohort_resumes_and_matches_the_one_node_gpu_check(tmp_path):
    """qwen on 2 ranks, llama on 1, ZeRO-3, 4 problems a step (qwen's shares 2, 2): 3 "nodes" of one process
    each train a step, save, resume to step 2. The reference is the GPU check's own one-node launch of the same
    worker (benchmarks/gpu/checks_dist.uneven_placement: 3 processes, 2 steps), so that check runs end to end
    here too. Labels and rewards are bit-equal on every rank and between the launches; a resume on another
    world size is refused."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TORCH_EXTENSIONS_DIR": str(tmp_path / "ext")}
    nodes, single = tmp_path / "nodes", tmp_path / "single"
    reference_check = checks_dist.uneven_placement(out=single)
    assert reference_check["ok"], reference_check
    assert reference_check["placement"] == {"qwen": [0, 1], "llama": [2]}
    assert reference_check["share_sizes"] == [2, 2, 4]

    args = [*checks_dist.UNEVEN_ARGS, "--max-steps", "1", "--save-every", "1"]  # the last --max-steps wins
    started = launch_nodes([1, 1, 1], str(nodes), *args, env=env)
    _ok(started)
    # the plan, printed by global rank 0 (on node 0) at start
    assert "corl-vl: placement: 2 agents on 3 node(s), 3 GPU(s)" in started[0].stderr
    assert "corl-vl:   qwen: 2 GPU(s), ranks 0-1, node(s) 0, 1" in started[0].stderr
    _ok(launch_nodes([1, 1, 1], str(nodes), *checks_dist.UNEVEN_ARGS, "--resume", env=env))

    placement = yaml.safe_load((nodes / "run" / "config.yaml").read_text())["placement"]
    assert placement["nodes"] == [[0], [1], [2]]  # from torchrun's node ranks, not from one host
    # qwen is larger than a node: it spans nodes 0 and 1; llama has node 2
    assert placement["agents"] == {"qwen": [0, 1], "llama": [2]} and placement["leftover"] == []
    one_node = yaml.safe_load((single / "run" / "config.yaml").read_text())["placement"]
    assert one_node["nodes"] == [[0, 1, 2]] and one_node["agents"] == placement["agents"]

    def ranks(out: Path, suffix: str = "") -> list[dict]:
        return [json.loads((out / f"rank-{r}{suffix}.json").read_text())[0] for r in range(3)]

    first, resumed, reference = ranks(nodes), ranks(nodes, "-resumed"), ranks(single)
    for a, b, ref in zip(first, resumed, reference):
        assert a["group_ranks"] == ref["group_ranks"] and a["changed_tensors"] > a["tensors"] // 2, a
        assert [len(a["steps"]), len(b["steps"])] == [1, 1]
        assert a["steps"] + b["steps"] == ref["steps"]  # every agent's answer ids and the labels, 2 steps
        assert a["rewards"] + b["rewards"] == ref["rewards"]  # this rank's share, bit-equal

    # the same launch on another world size: refused before any model loads, from the saved placement
    saved, _ = read_run_config(nodes / "run" / "config.yaml")
    cfg = config_from_dict({k: v for k, v in saved.items() if k != "placement"}, "config.yaml")
    previous = sorted((nodes / "run" / "checkpoints").glob("step-*"))[-1]
    other = {**placement, "nodes": [[0, 1]], "agents": {"qwen": [0], "llama": [1]}}
    with pytest.raises(CorlError, match="is not re-sharded onto another world size"):
        recipe._run_record(cfg, nodes / "run", previous, [], other)


@pytest.mark.distributed
def test_a_tensor_parallel_group_rolls_out_its_share_once_and_each_rank_trains_its_part(tmp_path):
    """One agent on 2 ranks with rollout.tensor_parallel_size=2: both ranks form one TP group, so both generate
    the whole step with the same seeds (HF engine here; vLLM would shard the model over them), then each keeps
    its half for the update. Its first rollout is therefore exactly the single-process run's: same answers,
    and the two ranks' rewards and labels together are the single process's. The launch is the GPU check's
    (benchmarks/gpu/checks_dist.tp_rollout, 2 steps with a weight sync between them), run end to end here."""
    from dist_worker import run_worker

    check = checks_dist.tp_rollout(engine="hf", out=tmp_path / "tp")
    assert check["ok"], check
    assert check["engine_class"] == "HFEngine" and check["rollouts"] == 2 and check["syncs"] >= 1
    (tmp_path / "single").mkdir()
    with one_thread():
        (reference,) = run_worker(tmp_path / "single", max_steps=1, solo=True, problems_per_step=4)
    ranks = [json.loads((tmp_path / "tp" / f"rank-{r}.json").read_text())[0] for r in (0, 1)]
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
