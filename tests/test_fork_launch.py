"""The forked test launcher (tests/fork_launch.py) keeps torchrun's contract: its environment, its agent store
(outliving rank 0), a failing rank stopping the others, and a hang ending with the ranks' stacks."""

from __future__ import annotations

import json
import os
import time

import pytest
from fork_launch import fork_launch

WORKER = """
import faulthandler, json, os, signal, sys, time
import torch
import torch.distributed as dist

faulthandler.register(signal.SIGTERM)
out, mode = sys.argv[1], sys.argv[2]
rank = int(os.environ["RANK"])
if mode == "hang":
    time.sleep(3600)
dist.init_process_group("gloo")
if mode == "fail" and rank == 1:
    raise ValueError("rank 1 fails on purpose")
if mode == "fail":
    dist.barrier()  # waits for rank 1 forever: the launcher must stop it
total = torch.tensor([rank + 1.0])
dist.all_reduce(total)
keys = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR", "OMP_NUM_THREADS")
record = {"env": {k: os.environ[k] for k in keys}, "total": total.item(), "argv0": sys.argv[0]}
if rank == 0:
    with open(f"{out}/rank-0.json", "w") as fh:
        json.dump(record, fh)
    os._exit(0)  # rank 0 leaves first, as a worker skipping teardown does
time.sleep(1.0)
store = dist.distributed_c10d._get_default_store()
store.set("after-rank-0-left", "yes")  # the store is the launcher's, not rank 0's
record["store"] = store.get("after-rank-0-left").decode()
with open(f"{out}/rank-1.json", "w") as fh:
    json.dump(record, fh)
"""


def _worker(tmp_path):
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    return script


def _env() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1"}


@pytest.mark.distributed
def test_ranks_get_torchruns_environment_and_the_store_outlives_rank_0(tmp_path):
    done = fork_launch(
        _worker(tmp_path), str(tmp_path), "ok", env=_env(), timeout=120, logs=tmp_path / "logs"
    )
    assert done.returncode == 0, done.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"rank-{r}.json").read_text()) for r in (0, 1)]
    for r, record in enumerate(ranks):
        assert record["env"] == {
            "RANK": str(r),
            "LOCAL_RANK": str(r),
            "WORLD_SIZE": "2",
            "LOCAL_WORLD_SIZE": "2",
            "GROUP_RANK": "0",
            "MASTER_ADDR": "127.0.0.1",
            "OMP_NUM_THREADS": "1",
        }
        assert record["total"] == 3.0 and record["argv0"].endswith("worker.py")
    assert ranks[1]["store"] == "yes"


@pytest.mark.distributed
def test_a_failing_rank_stops_the_rank_waiting_for_it(tmp_path):
    t0 = time.monotonic()
    done = fork_launch(
        _worker(tmp_path), str(tmp_path), "fail", env=_env(), timeout=300, logs=tmp_path / "logs"
    )
    assert done.returncode != 0 and "rank 1 fails on purpose" in done.stderr
    assert time.monotonic() - t0 < 120  # stopped, not left to the 300 s timeout


@pytest.mark.distributed
def test_a_hang_raises_with_the_ranks_stacks(tmp_path):
    with pytest.raises(TimeoutError, match="hung for 3 s") as hung:
        fork_launch(
            _worker(tmp_path), str(tmp_path), "hang", env=_env(), timeout=3, logs=tmp_path / "logs", grace=1
        )
    assert "most recent call first" in str(hung.value)  # faulthandler's dump on SIGTERM
