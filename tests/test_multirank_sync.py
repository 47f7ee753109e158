"""Multi-rank vLLM weight sync: every rank hands its own engine its own agent's weights (2 processes, gloo).

transformers' ``save_pretrained`` writes on global rank 0 only once torch.distributed is up; the old sync called
it plainly, so every other rank's engine reloaded from an empty (or stale) folder. Now the sync passes the
weights in memory (under the checkpoint-format names vLLM's loaders expect) or, with vLLM's multiprocessing on,
writes the folder on this rank.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from fork_launch import fork_launch

TESTS = Path(__file__).resolve().parent


@pytest.mark.distributed
def test_each_rank_syncs_its_own_weights(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = fork_launch(TESTS / "sync_worker.py", str(tmp_path), env=env, timeout=300, logs=tmp_path / "logs")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    reports = [json.loads((tmp_path / f"rank-{r}.json").read_text()) for r in range(2)]
    # the old sync's plain save_pretrained: rank 1 wrote nothing, its engine would reload stale files
    assert [r["plain_wrote_weights"] for r in reports] == [True, False]
    for r in reports:
        assert r["n_tensors"] > 0 and r["sync_has_processor"], r
        # the folder written by this rank and the in-memory list hold the same names and this rank's values
        assert r["same_names"] and r["max_abs_diff"] == 0.0, r
    assert reports[0]["first_value"] != reports[1]["first_value"]  # each rank's own update


def test_under_torchrun_each_rank_runs_an_in_process_engine_with_the_external_launcher():
    from corl_vl.rollout.vllm_engine import engine_kwargs
    from model_adapters.registry import create_adapter

    adapter = create_adapter("tiny-qwen2.5")
    common = {
        "seed": 0,
        "kv_cache_memory_bytes": 1 << 28,
        "gpu_memory_utilization": 0.4,
        "max_model_len": None,
    }
    single = engine_kwargs(adapter, on_gpu=True, sleep_between_phases=True, world_size=1, **common)
    assert "distributed_executor_backend" not in single and single["enable_sleep_mode"] is True
    ranked = engine_kwargs(adapter, on_gpu=True, sleep_between_phases=True, world_size=2, **common)
    assert ranked["distributed_executor_backend"] == "external_launcher"
    assert ranked["logprobs_mode"] == "processed_logprobs"
    cpu = engine_kwargs(adapter, on_gpu=False, sleep_between_phases=True, world_size=1, **common)
    assert cpu["enforce_eager"] and "enable_sleep_mode" not in cpu  # vLLM refuses sleep mode on CPU
