"""The memory plan's prediction vs the peak measured on CPU, for a width-only model's real training step.

Why: ``corl-vl plan`` is arithmetic (:mod:`corl_vl.plan.arithmetic`); this checks it against the project's own
code — the adapter's ``completion_logprobs`` forward, ``TorchBackend.backward`` and ``step`` (bf16 weights, fp32
masters, AdamW) — on a ``NAME@width-only`` preset: the real widths and vocabulary with two layers, so real-width
memory fits a CPU. Two optimizer steps run (the second gradient pass sees AdamW's state), at several
micro-batch × length points, each in a fresh process; peak = resident high-water mark minus the resident size
before the model was built (``peak_memory.py``).

    python benchmarks/perf/plan_vs_measured.py              # the committed table (results/plan_vs_measured.json)
    python benchmarks/perf/plan_vs_measured.py --one qwen3-1.7b@width-only 4 1024 32 off   # one point
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).parent / "results" / "plan_vs_measured.json"
GIB = 2**30
# (preset, micro-batch, prompt tokens, completion tokens, gradient checkpointing)
POINTS: list[tuple[str, int, int, int, str]] = [
    ("qwen3-1.7b@width-only", 1, 256, 32, "off"),
    ("qwen3-1.7b@width-only", 4, 512, 32, "off"),
    ("qwen3-1.7b@width-only", 8, 1024, 32, "off"),
    ("qwen3-1.7b@width-only", 8, 1024, 32, "on"),
    ("qwen3-1.7b@width-only", 4, 2048, 64, "off"),
    ("qwen3-1.7b@width-only", 8, 2048, 32, "off"),  # the gradient pass, not the optimizer step, sets the peak
]


def _prompts(adapter: Any, batch: int, prompt_tokens: int) -> list[Any]:
    """``batch`` prompts of exactly ``prompt_tokens`` tokens (a long question, cut to length)."""
    import dataclasses

    from corl_vl.data.problem import Problem

    question = " ".join(f"w{i % 97}" for i in range(prompt_tokens * 2))
    base = adapter.encode_prompt(Problem("p", question))
    ids = base.prompt_ids[:prompt_tokens]
    return [dataclasses.replace(base, problem_id=f"p{i}", prompt_ids=list(ids)) for i in range(batch)]


def measure(preset: str, batch: int, prompt_tokens: int, completion: int, ckpt: str) -> dict[str, Any]:
    import torch
    from peak_memory import peak_bytes, reset_peak

    from corl_vl.config import TrainConfig
    from corl_vl.plan import arithmetic as ar
    from corl_vl.train.backends import TorchBackend
    from corl_vl.train.grpo import Normalizer
    from model_adapters import create_adapter

    torch.manual_seed(0)
    adapter = create_adapter(preset, dtype="bfloat16")
    prompts = _prompts(adapter, batch, prompt_tokens)
    vocab = len(adapter.tokenizer)
    completions = [torch.randint(0, vocab, (completion,)).tolist() for _ in range(batch)]
    facts = adapter.memory_facts()
    baseline = reset_peak()
    model = adapter.load_model()
    model.train()
    if ckpt == "on":
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    backend = TorchBackend(model, TrainConfig(), lr=1e-6)
    advantages = torch.randn(batch)
    for _ in range(2):
        backend.zero_grad()
        out = adapter.completion_logprobs(model, prompts, completions, micro_batch_size=batch)
        loss = (out.logprobs * advantages[:, None]).sum() / out.mask.sum()
        backend.backward(loss)
        plan = backend.plan(Normalizer.of(out.mask.float()), 1, batch)
        backend.step(plan, zero_loss=lambda: torch.zeros(()))  # only DeepSpeed pads with zero losses
        del out, loss
    measured = peak_bytes() - baseline
    work = ar.Workload(batch, prompt_tokens + completion, completion, 0, ckpt == "on", 2)
    items = ar.agent_items(facts, work, ar.Sharding())
    predicted = ar.update_peak(items)
    return {
        "preset": preset,
        "micro_batch": batch,
        "prompt": prompt_tokens,
        "completion": completion,
        "checkpointing": ckpt,
        "parameters": facts.parameters,
        "predicted_gib": round(predicted / GIB, 3),
        "measured_gib": round(measured / GIB, 3),
        "error": round(predicted / measured - 1, 3),
        "predicted_items_gib": {k: round(v / GIB, 3) for k, v in items.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--one", nargs=5, metavar=("PRESET", "B", "PROMPT", "COMPLETION", "CKPT"))
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    if args.one:
        preset, batch, prompt, completion, ckpt = args.one
        print(json.dumps(measure(preset, int(batch), int(prompt), int(completion), ckpt)))
        return
    from peak_memory import run_points  # this script's folder

    from corl_vl.io import write_text_atomic

    rows = run_points(__file__, POINTS)
    worst = max(abs(r["error"]) for r in rows)
    payload = {
        "command": "python benchmarks/perf/plan_vs_measured.py",
        "worst_abs_error": worst,
        "points": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(args.out, json.dumps(payload, indent=1) + "\n")


if __name__ == "__main__":
    main()
