"""The chunked logprob tail under DeepSpeed ZeRO-3 on 2 gloo ranks that score different numbers of tokens
(5 chunks against 2): no hang, logprobs and the LM head's gradient equal to the unchunked tail's, and the head's
weight gathered a fixed number of times per tail call, not per chunk."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from fork_launch import fork_launch

TESTS = Path(__file__).resolve().parent


@pytest.mark.distributed
def test_zero3_tail_with_uneven_token_counts_trains_and_gathers_the_head_once(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TORCH_EXTENSIONS_DIR": str(tmp_path / "ext")}
    proc = fork_launch(
        TESTS / "zero3_tail_worker.py", str(tmp_path), env=env, timeout=600, logs=tmp_path / "logs"
    )
    hangs = "".join(p.read_text()[-3000:] for p in sorted(tmp_path.glob("hang-*.txt")))
    assert proc.returncode == 0, proc.stderr[-5000:] + hangs
    seen = [json.loads((tmp_path / f"rank-{rank}.json").read_text()) for rank in range(2)]
    # per step: [no-grad scoring pass, chunked forward + backward]; the same on both ranks although rank 0 runs
    # 5 chunks and rank 1 two. Per chunk it was 1 + 3 per chunk (forward, recompute, backward hook): 16 and 7.
    assert seen[0]["gathers"] == seen[1]["gathers"]
    no_grad, grad = seen[0]["gathers"][0::2], seen[0]["gathers"][1::2]
    assert max(no_grad) <= 2  # the model's own head call (on zero positions) + the tail's one call
    assert max(grad) <= 3  # + the tail's backward
    for rank in seen:
        # same ops per row as the textbook tail: fp32 rounding only
        assert max(rank["logprob_gap"]) <= 1e-5
        for gap, norm in zip(rank["grad_gap"], rank["grad_norm"], strict=True):
            # the chunked sum runs in another order than the textbook's: fp32 rounding, far below 1e-5 of the norm
            assert gap <= 1e-5 * norm
