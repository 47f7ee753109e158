"""Peak memory per trained parameter of the Torch backend's optimizer step, bf16 weights, measured on CPU.

Why bytes per parameter: the optimizer's memory is a fixed number of bytes per trained weight (bf16 weight,
fp32 master, fp32 gradient, AdamW's two moments, the step's temporaries), and a ``NAME@width-only`` preset has
the real widths and vocabulary, so its tensors are as large as the full model's biggest ones. Each point builds
the model, runs two training steps of the project's own code (``completion_logprobs`` forward, ``TorchBackend``
``backward`` and ``step``) over a short micro-batch, and reports, above the resident size before the model was
built (``peak_memory.py``; every point in a fresh process):

- ``step``: the peak during the second ``step`` (the moments exist by then) — the target (≤ 16 B/param);
- ``update``: the peak over the whole second update (gradient pass included);
- ``after``: what stays resident between steps.

    python benchmarks/perf/optimizer_memory.py                # the committed table (results/optimizer_memory.json)
    python benchmarks/perf/optimizer_memory.py --code DIR --label before   # another checkout's code (e.g. main)
    python benchmarks/perf/optimizer_memory.py --one qwen3-1.7b@width-only 1 none   # one point
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).parent / "results" / "optimizer_memory.json"
PROMPT_TOKENS, COMPLETION_TOKENS = 64, 16  # short: the optimizer's bytes, not activations, set the peak
# (preset, micro-batches per step, optimizer.offload)
POINTS: list[tuple[str, int, str]] = [
    ("qwen3-1.7b@width-only", 1, "none"),
    ("qwen3-1.7b@width-only", 1, "cpu"),
    ("qwen3-1.7b@width-only", 2, "none"),
]


def measure(preset: str, micro_batches: int, offload: str) -> dict[str, Any]:
    import dataclasses

    import torch
    from peak_memory import peak_bytes, reset_peak, rss_bytes

    from corl_vl.config import TrainConfig
    from corl_vl.data.problem import Problem
    from corl_vl.train.backends import TorchBackend
    from corl_vl.train.grpo import Normalizer
    from model_adapters import create_adapter

    torch.manual_seed(0)
    adapter = create_adapter(preset, dtype="bfloat16")
    base = adapter.encode_prompt(Problem("p", " ".join(f"w{i % 97}" for i in range(2 * PROMPT_TOKENS))))
    prompt = dataclasses.replace(base, prompt_ids=list(base.prompt_ids[:PROMPT_TOKENS]))
    vocab = len(adapter.tokenizer)
    baseline = reset_peak()
    model = adapter.load_model()
    model.train()
    options = {}
    if offload != "none":  # the keyword exists only where the backend has an offload setting
        from corl_vl.config import OptimizerConfig

        options["optimizer"] = OptimizerConfig(offload=offload)
    backend = TorchBackend(model, TrainConfig(), lr=1e-6, **options)
    trained = sum(p.numel() for p in model.parameters() if p.requires_grad)
    for step in range(2):
        if step == 1:
            reset_peak()
        backend.zero_grad()
        for _ in range(micro_batches):
            completion = [torch.randint(0, vocab, (COMPLETION_TOKENS,)).tolist()]
            out = adapter.completion_logprobs(model, [prompt], completion, micro_batch_size=1)
            backend.backward((out.logprobs * torch.randn(())).sum() / out.mask.sum() / micro_batches)
            del out
        update_peak = peak_bytes()
        reset_peak()
        plan = backend.plan(Normalizer.of(torch.ones(1, COMPLETION_TOKENS)), micro_batches, 1)
        backend.step(plan, zero_loss=lambda: torch.zeros(()))
        step_peak = peak_bytes()
    after = rss_bytes()
    optimizer = backend.optimizer
    fused = optimizer.param_groups[0].get("fused")
    return {
        "preset": preset,
        "micro_batches": micro_batches,
        "offload": offload,
        "optimizer": type(optimizer).__name__,
        "fused": bool(fused),
        "torch": torch.__version__,
        "threads": int(os.environ.get("OMP_NUM_THREADS", "0")),
        "trained_parameters": trained,
        "step_bytes_per_param": round((step_peak - baseline) / trained, 2),
        "update_bytes_per_param": round((max(step_peak, update_peak) - baseline) / trained, 2),
        "after_bytes_per_param": round((after - baseline) / trained, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--one", nargs=3, metavar=("PRESET", "MICRO_BATCHES", "OFFLOAD"))
    parser.add_argument("--code", type=Path, help="measure another checkout's corl_vl (default: this one)")
    parser.add_argument("--label", default="after", help="the key the rows are stored under in --out")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    if args.one:
        preset, micro_batches, offload = args.one
        print(json.dumps(measure(preset, int(micro_batches), offload)))
        return
    from corl_vl.io import write_text_atomic

    # glibc otherwise raises its mmap threshold up to 32 MiB as blocks are freed and keeps later blocks of that
    # size in the heap after they are freed: the resident size would count memory the code no longer holds
    os.environ.setdefault("MALLOC_MMAP_THRESHOLD_", str(1 << 16))
    points = [p for p in POINTS if args.code is None or p[2] == "none"]  # older code has no offload
    payload = json.loads(args.out.read_text()) if args.out.exists() else {}
    payload["command"] = "python benchmarks/perf/optimizer_memory.py [--code DIR --label before]"
    payload[args.label] = []
    args.out.parent.mkdir(parents=True, exist_ok=True)
    for point in points:  # written after every point: a point the machine cannot hold loses only itself
        payload[args.label].append(_run_point(point, args.code))
        write_text_atomic(args.out, json.dumps(payload, indent=1) + "\n")


def _run_point(point: tuple[str, int, str], code: Path | None) -> dict[str, Any]:
    """One point in a fresh process (``peak_memory.run_points``), or with another checkout's code first on
    ``PYTHONPATH`` (``corl_vl`` is imported as the interpreter starts, so the child cannot switch later)."""
    import subprocess
    import sys

    from peak_memory import run_points  # this script's folder

    if code is None:
        return run_points(__file__, [point])[0]
    here = Path(__file__).resolve().parent
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(code.resolve()), str(here)])}
    out = subprocess.run(
        [sys.executable, __file__, "--one", *map(str, point)],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    row = json.loads(out.stdout.strip().splitlines()[-1])
    print(json.dumps(row), flush=True)
    return row


if __name__ == "__main__":
    main()
