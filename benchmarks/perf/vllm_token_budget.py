"""vLLM rollout batches larger than one engine step's token budget on CPU: which way out, at what cost?

Why: every corl-vl vLLM request is seeded, and vLLM rolls a seeded generator back after a chunked (partial)
prefill, which a CPU generator cannot do; a rollout batch whose prompt tokens exceed ``max_num_batched_tokens``
(4,096 on CPU) then fails inside vLLM. Ways out, each with per-request seeds kept:

- ``no_chunked``: ``enable_chunked_prefill=False`` (what the engine does on CPU): a prompt that does not fit
  waits whole for the next engine step;
- ``split``: chunked prefill on, the batch cut into generate calls that each fit the budget and vLLM's
  ``max_num_seqs`` (request seeds unchanged: problem i keeps ``seed + i·K``);
- ``big_budget``: chunked prefill on with ``max_num_batched_tokens`` large enough for the batch (needs the
  batch size when the engine is built);
- ``chunked``: vLLM's default, for reference (it fails above the budget).

Each variant runs in a process of its own on the demo's tiny Qwen2.5-VL (its prompts with an image), K
completions of exactly ``--tokens`` new tokens per problem, for each batch size; reported: median seconds per
rollout batch, and whether its completions equal ``no_chunked``'s token for token (same seeds).

    python benchmarks/perf/vllm_token_budget.py [--problems 4,8,32] [--k 8] [--tokens 8] [--repeats 3]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).parent / "results" / "vllm_token_budget.json"
VARIANTS = {
    "no_chunked": {},
    "split": {"enable_chunked_prefill": True},
    "big_budget": {"enable_chunked_prefill": True, "max_num_batched_tokens": 65536},
    "chunked": {"enable_chunked_prefill": True},
}


def split_groups(prompt_tokens: list[int], k: int, budget: int, max_seqs: int) -> list[tuple[int, int]]:
    """``[start, end)`` problem ranges whose ``k`` requests each fit ``budget`` tokens and ``max_seqs`` requests."""
    groups, start, tokens = [], 0, 0
    for i, n in enumerate(prompt_tokens):
        if i > start and (tokens + n * k > budget or (i - start + 1) * k > max_seqs):
            groups.append((start, i))
            start, tokens = i, 0
        tokens += n * k
    groups.append((start, len(prompt_tokens)))
    return groups


def rollout(engine: Any, problems: list, prompts: list, groups: list, seed: int, kw: dict) -> list[list[int]]:
    """The completion ids of one rollout batch, one generate call per group."""
    out = []
    for a, b in groups:  # problem i keeps its request seed seed + i·K in any group
        got = engine.generate(problems[a:b], prompts=prompts[a:b], seed=seed + a * kw["k"], **kw)
        out += [c.ids for r in got for c in r.completions]
    return out


def worker(variant: str, args: argparse.Namespace) -> dict[str, Any]:
    from corl_vl.data.synth import generate_problems
    from corl_vl.paths import configure_cache_env
    from corl_vl.rollout.vllm_engine import VLLMEngine
    from model_adapters.registry import create_adapter

    configure_cache_env()
    adapter = create_adapter("tiny-qwen2.5-vl")
    t0 = time.perf_counter()
    engine = VLLMEngine(adapter, engine_args=VARIANTS[variant] or None)
    build_s = time.perf_counter() - t0
    sched = engine.llm.llm_engine.vllm_config.scheduler_config
    budget, max_seqs = engine.token_budget, int(sched.max_num_seqs)
    kw = {"k": args.k, "temperature": 1.0, "max_new_tokens": args.tokens, "min_new_tokens": args.tokens}
    rows = []
    for n in args.problems:
        problems = generate_problems(n, seed=0)
        prompts = [adapter.encode_prompt(p) for p in problems]
        lengths = [len(p.prompt_ids) for p in prompts]
        groups = split_groups(lengths, args.k, budget, max_seqs) if variant == "split" else [(0, n)]

        row: dict[str, Any] = {"problems": n, "prompt_tokens": sum(lengths) * args.k, "calls": len(groups)}
        try:
            rollout(engine, problems, prompts, groups, 0, kw)  # warm-up
            seconds = []
            for _ in range(args.repeats):
                t0 = time.perf_counter()
                ids = rollout(engine, problems, prompts, groups, 1, kw)
                seconds.append(time.perf_counter() - t0)
            row.update(
                seconds=statistics.median(seconds),
                samples=seconds,
                ids_sha=hashlib.sha256(json.dumps(ids).encode()).hexdigest()[:16],
            )
        except Exception as err:  # the variant this measures against fails inside vLLM
            row["error"] = f"{type(err).__name__}: {str(err).splitlines()[0][:200]}"
            break  # a failed vLLM engine is not reused
        finally:
            rows.append(row)
    engine.close()
    return {"variant": variant, "budget": budget, "max_num_seqs": max_seqs, "build_s": build_s, "rows": rows}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--problems", default="4,8,32", help="batch sizes (problems per rollout batch)")
    parser.add_argument("--k", type=int, default=8, help="completions per problem")
    parser.add_argument("--tokens", type=int, default=8, help="new tokens per completion, forced")
    parser.add_argument(
        "--repeats", type=int, default=3, help="measured rollouts per size (after one warm-up)"
    )
    parser.add_argument("--variants", default=",".join(VARIANTS), help=f"of {', '.join(VARIANTS)}")
    parser.add_argument("--out", type=Path, default=RESULTS, help=f"JSON results (default {RESULTS})")
    parser.add_argument("--_worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.problems = [int(x) for x in args.problems.split(",")]
    if args._worker:
        result = worker(args._worker, args)
        print("RESULT " + json.dumps(result), flush=True)
        return 0
    passed = [a for a in (argv if argv is not None else sys.argv[1:]) if not a.startswith("--out")]
    results = []
    for variant in args.variants.split(","):
        proc = subprocess.run(
            [sys.executable, __file__, "--_worker", variant, *passed],
            capture_output=True,
            text=True,
            env={**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")},
        )
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
        if not lines:
            raise SystemExit(f"{variant}: the worker exited ({proc.returncode}): {proc.stderr[-2000:]}")
        results.append(json.loads(lines[-1][len("RESULT ") :]))
    reference = {r["problems"]: r.get("ids_sha") for r in results[0]["rows"]}
    for result in results:
        for row in result["rows"]:
            row["same_as_" + results[0]["variant"]] = row.get("ids_sha") == reference.get(row["problems"])
            cost = row.get("error") or f"{row['seconds']:.2f} s in {row['calls']} call(s)"
            print(
                f"{result['variant']:>10}  budget {result['budget']:>6}  {row['problems']:>3} problems "
                f"({row['prompt_tokens']:>6} prompt tokens): {cost}",
                flush=True,
            )
    load = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    record = {
        "command": "python benchmarks/perf/vllm_token_budget.py " + " ".join(passed),
        "settings": {
            "k": args.k,
            "tokens": args.tokens,
            "repeats": args.repeats,
            "model": "tiny-qwen2.5-vl",
            "threads": os.environ.get("OMP_NUM_THREADS"),
            "load": load,
        },
        "results": results,
    }
    from corl_vl.io import write_text_atomic

    write_text_atomic(args.out, json.dumps(record, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
