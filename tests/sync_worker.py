"""One rank of tests/test_multirank_sync.py (run under ``torchrun``, gloo). Not a test module itself.

Usage: ``sync_worker.py OUT_DIR``. Each rank holds its own tiny model (tiny Qwen2.5-VL: transformers renames
its weights in memory), changes it in a rank-specific way (as an update would), and writes what the vLLM
engine's sync would hand vLLM: the sync folder (written by *this* rank) and the in-memory weight list. It also
tries a plain ``save_pretrained`` to show what the old sync did on ranks other than 0. Results go to
``OUT_DIR/rank-<r>.json``; the test compares the files with the model.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from corl_vl.paths import configure_cache_env

configure_cache_env()


def main(out: Path) -> None:
    import torch
    import torch.distributed as dist
    from safetensors.torch import load_file

    from corl_vl.rollout.vllm_engine import checkpoint_format_weights, save_weights_on_this_rank
    from model_adapters.registry import create_adapter

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    adapter = create_adapter("tiny-qwen2.5-vl")
    model = adapter.load_model()
    with torch.no_grad():  # a rank-specific "update"
        for p in model.parameters():
            p.add_(0.01 * (rank + 1))
    synced = out / f"sync-{rank}"
    save_weights_on_this_rank(model, adapter, synced)
    plain = out / f"plain-{rank}"
    model.save_pretrained(plain, safe_serialization=True)  # what the sync used to call
    dist.barrier()

    saved: dict[str, torch.Tensor] = {}
    for f in sorted(synced.glob("*.safetensors")):
        saved.update(load_file(f))
    memory = dict(checkpoint_format_weights(model, adapter))
    report = {
        "rank": rank,
        "plain_wrote_weights": any(plain.glob("*.safetensors")),
        "sync_has_processor": any(synced.glob("*token*")),
        "same_names": sorted(saved) == sorted(memory),
        "max_abs_diff": max(float((saved[k] - memory[k].cpu()).abs().max()) for k in saved),
        "first_value": float(next(iter(sorted(saved.items())))[1].flatten()[0]),
        "n_tensors": len(saved),
    }
    (out / f"rank-{rank}.json").write_text(json.dumps(report))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    from torchrun_launch import exit_without_teardown

    main(Path(sys.argv[1]))
    exit_without_teardown()  # the results are written
