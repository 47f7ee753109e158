"""Agents on disjoint rank groups: placement, the mpu guard, and a real 2-process ZeRO-2 cohort on gloo.

The 2-process run (``torchrun``, one tiny text agent per process, each a DeepSpeed ZeRO-2 engine with its own
AdamW) is compared with the single-process run of the same config and seeds. Rollouts, answers, labels,
rewards and every reward/label/length metric match exactly; the update agrees to float rounding only, because
DeepSpeed clips with a grad norm it computes over its flat fp32 partition (≈ 1e-5 relative from torch's
per-tensor norm), and the step-2 IS statistics inherit that 1e-8 weight difference.
"""

from __future__ import annotations

import json
import math
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from corl_vl.distributed import AgentMPU, deepspeed_engine, place_agents, share
from corl_vl.errors import CorlError

TESTS = Path(__file__).resolve().parent
EXACT = ("reward/", "label/", "peer/", "groups/", "length/", "answer/", "trained_rows", "lr")


def test_two_agents_on_four_ranks_get_disjoint_contiguous_groups():
    groups = place_agents(2, 4)
    assert groups == [[0, 1], [2, 3]]
    assert place_agents(3, 3) == [[0], [1], [2]]
    with pytest.raises(CorlError, match="cannot be split evenly"):
        place_agents(2, 3)
    with pytest.raises(CorlError, match="cannot be split evenly"):
        place_agents(3, 2)
    ids = [f"p{i}" for i in range(5)]
    assert [share(ids, r, 2) for r in range(2)] == [["p0", "p1", "p2"], ["p3", "p4"]]


def test_mpu_answers_with_the_agents_group_and_a_single_rank_model_group():
    mpu = AgentMPU("group-of-agent-1", [2, 3], "rank-3-alone", rank=3)
    assert mpu.get_data_parallel_group() == "group-of-agent-1"
    assert (mpu.get_data_parallel_world_size(), mpu.get_data_parallel_rank()) == (2, 1)
    assert mpu.get_data_parallel_group_ranks() == [2, 3]
    assert mpu.get_model_parallel_group() == mpu.get_tensor_model_parallel_group() == "rank-3-alone"
    assert (mpu.get_model_parallel_world_size(), mpu.get_model_parallel_rank()) == (1, 0)


def test_an_engine_without_mpu_is_refused():
    model = torch.nn.Linear(2, 2)
    opt = torch.optim.AdamW(model.parameters())
    with pytest.raises(CorlError, match="without the agent's mpu"):
        deepspeed_engine(model, opt, {"train_micro_batch_size_per_gpu": 1}, None)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _records(run: Path, agent: str) -> list[dict]:
    return [json.loads(line) for line in (run / "agents" / agent / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.distributed
def test_two_process_zero2_cohort_matches_the_single_process_run(tmp_path):
    from dist_worker import run_worker
    from safetensors.torch import load_file

    dist_out, single_out = tmp_path / "dist", tmp_path / "single"
    dist_out.mkdir()
    single_out.mkdir()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TORCH_EXTENSIONS_DIR": str(tmp_path / "ext")}  # cold cache
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--nnodes=1",
           f"--master_port={_free_port()}", str(TESTS / "dist_worker.py"), str(dist_out)]  # fmt: skip
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    seconds = time.perf_counter() - t0
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    assert seconds < 180, f"the 2-process run took {seconds:.0f} s"
    assert not list((tmp_path / "ext").glob("**/*.so"))  # no DeepSpeed op was compiled (shm_comm skipped)
    reference = {r["agent"]: r for r in run_worker(single_out)}

    ranks = [json.loads((dist_out / f"rank-{r}.json").read_text()) for r in (0, 1)]
    assert [len(r) for r in ranks] == [1, 1]  # each rank owns exactly one agent
    r0, r1 = ranks[0][0], ranks[1][0]
    assert (r0["agent"], r0["group_ranks"], r1["agent"], r1["group_ranks"]) == ("qwen", [0], "llama", [1])
    assert r0["deepspeed"] and r1["deepspeed"] and r0["world_size"] == r1["world_size"] == 2
    for rec in (r0, r1):  # both agents really trained
        assert rec["changed_tensors"] > rec["tensors"] // 2, rec
    single_steps = reference["qwen"]["steps"]
    assert len(r0["steps"]) == len(r1["steps"]) == len(single_steps) == 2
    for s0, s1, ref in zip(r0["steps"], r1["steps"], single_steps):
        ids = ref["answer_ids"]["qwen"]
        assert len(ids) == 2
        for step in (s0, s1):  # every rank received every agent's answers, keyed by the same ids
            assert step["answer_ids"] == {"qwen": ids, "llama": ids}
            assert step["labels"] == ref["labels"]  # pseudo-labels identical on every rank and to 1 process
    assert any(
        label is not None
        for step in single_steps
        for lab in step["labels"].values()
        for label in lab.values()
    )

    for agent in ("qwen", "llama"):
        got, want = _records(dist_out / "run", agent), _records(single_out / "run", agent)
        assert [r["step"] for r in got] == [0, 1]
        assert sum(r["trained_rows"] for r in got) > 0
        for g, w in zip(got, want):
            assert g.keys() == w.keys()
            for key, value in w.items():
                if key.startswith("time/") or value is None:
                    continue
                if key.startswith(EXACT):
                    assert g[key] == value, (agent, g["step"], key)
                else:
                    assert math.isclose(g[key], value, rel_tol=1e-4, abs_tol=1e-6), (agent, g["step"], key)
        a = load_file(str(dist_out / "run" / "checkpoints" / "step-000002" / agent / "model.safetensors"))
        b = load_file(str(single_out / "run" / "checkpoints" / "step-000002" / agent / "model.safetensors"))
        assert a.keys() == b.keys() and max(float((a[k] - b[k]).abs().max()) for k in a) < 1e-5
    ckpt = dist_out / "run" / "checkpoints" / "step-000002"
    assert json.loads((ckpt / "meta.json").read_text())["world_size"] == 2
    assert (ckpt / "rng" / "rank-1.pt").exists() and (ckpt / "llama" / "deepspeed" / "state").is_dir()
