"""Per-phase times of one cohort step for N = 1, 2, 3, 4 tiny agents, HF and vLLM rollouts side by side.

Why: the cohort owns every agent in one job, so a step costs the sum of its agents' rollout, scoring, update
and sync; that sum must grow linearly in N (no hidden all-pairs work in the label exchange). The script times
real :meth:`corl_vl.train.cohort.Cohort.step` calls through the phase metrics the cohort itself logs
(``time/rollout``, ``time/reward``, ``time/update``, ``time/sync``: totals over the agents), excludes warm-up
steps (first-call allocations, compilation, caches), and reports the per-agent cost ``(time(N)/N)/time(1)``.

Each (engine, N) runs in its own subprocess, so one engine's memory and vLLM state cannot slow the next.
Agents cycle through ``--models`` (default: mixed families, vision and text); with mixed families the
per-agent ratio also reflects that the families differ in cost — pass one preset, e.g. ``--models
tiny-qwen2.5``, to isolate the scaling. N = 1 uses the TTRL reward (Co-RL needs a peer); its step does the same
phases. N ≥ 2 uses a ring topology (identical to mutual for N = 2).

    python benchmarks/perf/step.py [--steps 3] [--warmup 1] [--engines hf,vllm] [--agents 1,2,3,4]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

PHASES = ("rollout", "reward", "update", "sync")
DEFAULT_MODELS = "tiny-qwen2.5-vl,tiny-internvl3.5,tiny-qwen2.5,tiny-llama3"
RESULTS = Path(__file__).parent / "results" / "step.json"


def cohort_config(n: int, engine: str, models: list[str], args: argparse.Namespace) -> Any:
    from corl_vl.config import config_from_dict

    presets = [models[i % len(models)] for i in range(n)]
    raw = {
        "agents": [{"name": f"a{i}-{p}", "model": p} for i, p in enumerate(presets)],
        "topology": {"kind": "ring"},
        "data": {"train": "synthetic", "limit": 64, "problems_per_step": args.problems},
        "grpo": {"k": args.k, "max_new_tokens": args.max_new_tokens, "micro_batch_size": 8},
        "rollout": {"engine": engine, "batch_size": 8},
        "train": {
            "max_steps": args.warmup + args.steps,
            "lr": 1e-5,
            "reward": args.reward if n > 1 or args.reward != "co_rl" else "ttrl",
            "output_dir": tempfile.mkdtemp(prefix="corl-perf-"),
            "plot": False,
        },
    }
    return config_from_dict(raw, source="benchmarks/perf/step.py")


def measure_one(engine: str, n: int, models: list[str], args: argparse.Namespace) -> dict[str, Any]:
    """Build the cohort, run warm-up + measured steps, return the median phase times of the measured ones
    (the median, because a shared machine adds occasional slow steps that would dominate a mean)."""
    from corl_vl.train.cohort import Cohort

    t0 = time.perf_counter()
    cfg = cohort_config(n, engine, models, args)
    cohort = Cohort.from_config(cfg)
    build_s = time.perf_counter() - t0
    samples: list[dict[str, float]] = []
    for step in range(args.warmup + args.steps):
        metrics = cohort.step()
        times = next(iter(metrics.values()))  # phase times are cohort totals, copied into every agent
        if step >= args.warmup:
            samples.append({p: float(times[f"time/{p}"]) for p in PHASES})
    shutil.rmtree(cfg.train.output_dir, ignore_errors=True)  # a step writes nothing there; keep /tmp clean
    median = {p: statistics.median(s[p] for s in samples) for p in PHASES}
    return {
        "engine": engine,
        "n": n,
        "models": [a.name for a in cohort.agents],
        "build_s": build_s,
        "phases_s_median": median,
        "total_s": sum(median.values()),
        "steps": samples,
    }


def run_child(engine: str, n: int, args: argparse.Namespace) -> dict[str, Any]:
    """One (engine, N) in a fresh interpreter; its result comes back as the last stdout line."""
    cmd = [
        sys.executable,
        __file__,
        "--_one",
        f"{engine}:{n}",
        "--steps",
        str(args.steps),
        "--warmup",
        str(args.warmup),
        "--models",
        args.models,
        "--k",
        str(args.k),
        "--problems",
        str(args.problems),
        "--max-new-tokens",
        str(args.max_new_tokens),
        "--reward",
        args.reward,
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
        return {"engine": engine, "n": n, "error": " | ".join(tail)}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def add_ratios(results: list[dict[str, Any]]) -> None:
    """``per_agent_ratio`` = (time(N)/N) / time(1) within each engine (1.0 = perfectly linear)."""
    base = {r["engine"]: r["total_s"] for r in results if r.get("n") == 1 and "total_s" in r}
    for r in results:
        if "total_s" in r and r["engine"] in base:
            r["per_agent_ratio"] = r["total_s"] / r["n"] / base[r["engine"]]


def print_table(results: list[dict[str, Any]]) -> None:
    header = ["engine", "N", *[f"{p} s" for p in PHASES], "step s", "step/N s", "per-agent ratio"]
    rows = []
    for r in results:
        if "error" in r:
            rows.append([r["engine"], str(r["n"]), f"failed: {r['error'][:80]}"])
            continue
        ratio = r.get("per_agent_ratio")
        rows.append(
            [
                r["engine"],
                str(r["n"]),
                *[f"{r['phases_s_median'][p]:.2f}" for p in PHASES],
                f"{r['total_s']:.2f}",
                f"{r['total_s'] / r['n']:.2f}",
                "n/a" if ratio is None else f"{ratio:.2f}",
            ]
        )
    widths = [max(len(row[i]) for row in [header, *rows] if i < len(row)) for i in range(len(header))]
    for row in [header, *rows]:
        print("  ".join(cell.rjust(w) for cell, w in zip(row, widths)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=3, help="measured steps per setting (default 3)")
    parser.add_argument("--warmup", type=int, default=1, help="warm-up steps excluded (default 1)")
    parser.add_argument("--engines", default="hf,vllm", help="comma-separated: hf, vllm")
    parser.add_argument("--agents", default="1,2,3,4", help="comma-separated cohort sizes")
    parser.add_argument("--models", default=DEFAULT_MODELS, help="presets the agents cycle through")
    parser.add_argument("--k", type=int, default=4, help="completions per problem (default 4)")
    parser.add_argument("--problems", type=int, default=2, help="problems per step (default 2)")
    parser.add_argument("--max-new-tokens", type=int, default=16, help="completion cap (default 16)")
    parser.add_argument(
        "--reward", default="rent", choices=("rent", "co_rl"), help="rent (default: full update) or co_rl"
    )
    parser.add_argument("--out", type=Path, default=RESULTS, help=f"JSON results (default {RESULTS})")
    parser.add_argument("--_one", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.steps < 1 or args.warmup < 0:
        parser.error("--steps must be ≥ 1 and --warmup ≥ 0")
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    if args._one:
        from corl_vl.paths import configure_cache_env

        configure_cache_env()
        engine, n = args._one.split(":")
        print(json.dumps(measure_one(engine, int(n), models, args)))
        return 0
    engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    sizes = [int(n) for n in args.agents.split(",") if n.strip()]
    results = []
    for engine in engines:
        for n in sizes:
            print(f"[{engine}] N={n} ...", file=sys.stderr, flush=True)
            results.append(run_child(engine, n, args))
    add_ratios(results)
    print_table(results)
    settings = {k: v for k, v in vars(args).items() if k not in ("_one", "out")}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_suffix(".json.tmp")
    tmp.write_text(json.dumps({"settings": settings, "results": results}, indent=2))
    tmp.replace(args.out)
    print(f"wrote {args.out}")
    return 0 if all("error" not in r for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
