"""Under ZeRO-3 a rollout gathers the full weights only for an engine that generates from the trainer's module,
and each rank of the agent's group samples on its own seed stream (2 processes, gloo)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from fork_launch import fork_launch

TESTS = Path(__file__).resolve().parent


@pytest.mark.distributed
def test_zero3_gathers_for_the_hf_engine_only_and_ranks_sample_on_their_own_streams(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TORCH_EXTENSIONS_DIR": str(tmp_path / "ext")}
    proc = fork_launch(
        TESTS / "zero3_rollout_worker.py", str(tmp_path), env=env, timeout=600, logs=tmp_path / "logs"
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    for rank in range(2):
        seen = json.loads((tmp_path / f"rank-{rank}.json").read_text())
        assert seen["reads_module"] == [{"whole": True, "stream": [rank, 2]}]
        # an engine with its own synced copy (vLLM) never reads the module: the partitions stay partitioned
        assert seen["own_copy"] == [{"whole": False, "stream": [rank, 2]}]
