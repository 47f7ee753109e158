"""Peak memory of the logprob tail (LM head → log-softmax → logprobs) above baseline, vs B × T and vocabulary.

Why: the tail is the one part of a GRPO step whose memory scales with tokens × vocabulary; at 150–260 k
vocabularies an unchunked tail needs gigabytes per thousand completion tokens. This measures the project's own
:func:`model_adapters.logprob_tail.token_logprobs` (``chunked``) and, for comparison, the unchunked textbook tail
(``full``: all logits, an fp32 copy, a copy divided by T, the log-softmax) on a bf16 LM head of ``vocab × hidden``
with random hidden states, forward + backward (head weight and hidden states get gradients; the head weight's
gradient, ``vocab × hidden × 2`` bytes, is part of the measured peak) or the no-grad scoring pass with entropy.

Each point runs in a fresh process; peak = the kernel's resident high-water mark minus the resident size just
before the measured call (``peak_memory.py``), after a small warm-up call so library start-up is not counted.

    python benchmarks/perf/logprob_memory.py            # the committed table (results/logprob_memory.json)
    python benchmarks/perf/logprob_memory.py --one chunked 151936 2048 8 1024 grad   # one point, JSON to stdout
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).parent / "results" / "logprob_memory.json"
GIB = 2**30

# (method, vocab, hidden, batch, tokens per row, mode). The T-sweep runs at hidden 256 (the tail's working set
# does not depend on the hidden size; only the head's gradient does, and a CPU LM head at 2048 costs minutes per
# point); the target point runs at the real width, hidden 2048, and V = 262,208 once at Gemma-3-4B's 2560.
POINTS: list[tuple[str, int, int, int, int, str]] = [
    ("chunked", 151_936, 2048, 8, 1024, "grad"),  # the targets first: a busy machine reports them soonest
    ("chunked", 262_208, 2560, 8, 128, "grad"),
    ("full", 151_936, 256, 8, 128, "grad"),
    ("full", 151_936, 256, 8, 256, "grad"),
    ("chunked", 151_936, 256, 8, 128, "grad"),
    ("chunked", 151_936, 256, 8, 1024, "grad"),
    ("chunked", 262_208, 256, 8, 1024, "grad"),
    ("chunked", 151_936, 256, 8, 1024, "score"),
]


def _full_tail(head: Any, hidden: Any, targets: Any, temperature: float) -> Any:
    """The unchunked tail as one expression chain (what the adapter computed before the chunked tail)."""
    import torch

    logits = head(hidden)
    logp = torch.log_softmax(logits.float() / temperature, dim=-1)
    return torch.gather(logp, -1, targets[..., None]).squeeze(-1)


def measure(method: str, vocab: int, hidden_size: int, batch: int, tokens: int, mode: str) -> dict[str, Any]:
    import torch
    from peak_memory import peak_bytes, reset_peak

    from model_adapters.logprob_tail import token_logprobs

    torch.manual_seed(0)
    head = torch.nn.Linear(hidden_size, vocab, bias=False, dtype=torch.bfloat16)
    with torch.no_grad():
        head.weight.normal_(0.0, hidden_size**-0.5)
    grad = mode == "grad"
    hidden = torch.randn(batch, tokens, hidden_size, dtype=torch.bfloat16, requires_grad=grad)
    targets = torch.randint(0, vocab, (batch, tokens))
    weights = torch.randn(batch, tokens)

    def run(h: Any, t: Any) -> None:
        with torch.set_grad_enabled(grad):
            if method == "full":
                lp = _full_tail(head, h, t, 1.0)
            else:
                flat = h.reshape(-1, hidden_size)
                lp = token_logprobs(head, flat, t.reshape(-1), vocab_size=vocab, with_entropy=not grad)[0]
            if grad:
                (lp.reshape(-1) * weights.reshape(-1)[: lp.numel()]).sum().backward()

    run(hidden[:1, :4].detach().requires_grad_(grad), targets[:1, :4])  # library start-up, not measured
    head.weight.grad = None
    baseline = reset_peak()
    started = time.perf_counter()
    run(hidden, targets)
    seconds = time.perf_counter() - started
    peak = peak_bytes() - baseline
    return {
        "method": method,
        "vocab": vocab,
        "hidden": hidden_size,
        "batch": batch,
        "tokens": tokens,
        "mode": mode,
        "peak_above_baseline_gib": round(peak / GIB, 3),
        "head_grad_gib": round(vocab * hidden_size * 2 / GIB, 3) if grad else 0.0,
        "one_fp32_logits_copy_gib": round(batch * tokens * vocab * 4 / GIB, 3),
        "seconds": round(seconds, 1),
        "threads": torch.get_num_threads(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--one", nargs=6, metavar=("METHOD", "VOCAB", "HIDDEN", "B", "T", "MODE"))
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    from corl_vl.io import write_text_atomic

    if args.one:
        method, vocab, hidden, batch, tokens, mode = args.one
        print(json.dumps(measure(method, int(vocab), int(hidden), int(batch), int(tokens), mode)))
        return
    from peak_memory import run_points  # this script's folder

    rows = run_points(__file__, POINTS)
    command = "python benchmarks/perf/logprob_memory.py"
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(
        args.out,
        json.dumps(
            {"command": command, "threads": os.environ.get("OMP_NUM_THREADS"), "points": rows}, indent=1
        )
        + "\n",
    )


if __name__ == "__main__":
    main()
