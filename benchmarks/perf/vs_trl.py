"""corl-vl cohort steps side by side with TRL's ``GRPOTrainer`` (one agent) on the same tiny models.

Why: a user choosing corl-vl over forking TRL asks what a cohort step costs against TRL's step. Both arms run
the same tiny random models (tiny Qwen2.5 text, tiny Qwen2.5-VL), the same synthetic problems rendered by the
same chat template, the same batch (problems × K completions of exactly ``--tokens`` new tokens, forced in both
with ``min_new_tokens``), fp32, β = 0, one optimizer step per step, HF ``generate`` rollouts, one forward per
gradient pass (micro-batch = the whole batch in both).

Rewards: random models never write an answer, so both arms read one forced answer per completion from its
token ids (``crc32(ids) % 3``, real sampled ids, controlled text): TRL and corl-vl N = 1 reward the group
majority (TTRL), corl-vl N ≥ 2 runs Co-RL (mutual for 2, ring for 3) — every arm has labels and non-zero
advantages, so every arm does its full update.

Each arm is a process of its own (its peak RSS is its own); the arms are interleaved step by step (the order
rotates every round) so load changes on a shared machine hit every arm alike; medians over the measured
rounds and per-round paired ratios against TRL are reported.

``--shape paper`` (``shapes.py``): 1,024-pixel pictures, K = 8, long-tailed completion lengths in 32–1,024
forced identically in both arms, micro-batches of ``--micro-batch`` rows; each arm also reports the pictures its
vision towers encode per step and the padding share of its gradient forwards (forward hooks, the same in both
arms). Without TRL installed the corl-vl arms still run and every ratio against TRL reads n/a.

    pip install -e ".[perf]"   # TRL, not part of the default set-up
    # or, keeping the environment as it is: pip install --no-deps --target DIR trl==1.16.0; PYTHONPATH=.:DIR
    python benchmarks/perf/vs_trl.py [--shape tiny|paper] [--families text,vl] [--agents 1,2,3] [--steps 7]
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from shapes import (
    FAMILIES,
    PAPER_MAX_PIXELS,
    PaddingCounter,
    VisionCounter,
    force_lengths,
    peak_rss_mb,
    problems,
    stated_answer,
)

PHASES = ("rollout", "reward", "update")
RESULTS = Path(__file__).parent / "results" / "vs_trl.json"


# ------------------------------------------------------------------------------------------------ corl-vl arm
class ForcedAnswers:
    """The agent's real HF engine; each completion's text becomes its forced answer (the ids stay sampled)."""

    thread_safe = True

    def __init__(self, engine: Any, shape: str) -> None:
        self.engine, self.shape = engine, shape

    def generate(self, problems: Any, **kwargs: Any) -> Any:
        rollouts = self.engine.generate(problems, **kwargs)
        for r in rollouts:
            for j, c in enumerate(r.completions):
                c.text = f"The answer is \\boxed{{{stated_answer(c.ids, j, self.shape)}}}"
        return rollouts

    def sync_weights(self, model: Any) -> None:
        self.engine.sync_weights(model)

    def sleep(self) -> None:
        self.engine.sleep()

    def wake(self, tags: Any = None) -> None:
        self.engine.wake(tags)


def corl_arm(family: str, n: int, parallel: bool, args: argparse.Namespace) -> Any:
    """A cohort of ``n`` agents of the family; returns a function running one step → its phase times."""
    from corl_vl.config import config_from_dict
    from corl_vl.train.cohort import Cohort

    batch = args.problems * args.k
    paper = args.shape == "paper"
    options = {"image_options": {"max_pixels": PAPER_MAX_PIXELS}} if paper and family == "vl" else {}
    agent = {"model": FAMILIES[family], **({"adapter_kwargs": options} if options else {})}
    raw = {
        "agents": [{"name": f"a{i}", **agent} for i in range(n)],
        "reward": {"name": "co_rl" if n > 1 else "ttrl", "topology": "mutual" if n == 2 else "ring"},
        "data": {"train": "synthetic", "limit": args.pool, "problems_per_step": args.problems},
        "grpo": {
            "k": args.k,
            "max_new_tokens": args.tokens,
            "min_new_tokens": 0 if paper else args.tokens,  # paper: drawn lengths (shapes.force_lengths)
            "micro_batch_size": min(args.micro_batch, batch) if paper else batch,
            "beta": 0.0,
        },
        "rollout": {"engine": "hf", "batch_size": batch},
        "train": {
            "lr": 1e-6,
            "max_steps": 1000,
            "warmup_ratio": 0,
            "parallel_agents": parallel,
            "plot": False,
            "output_dir": tempfile.mkdtemp(prefix="vs-trl-"),
        },
    }
    cohort = Cohort.from_config(config_from_dict(raw, source="benchmarks/perf/vs_trl.py"))
    view = {p.id: p for p in problems(family, args.pool, args.shape)}  # paper: 1,024-pixel pictures
    for agent in cohort.agents:
        agent.engine = ForcedAnswers(agent.engine, args.shape)
        agent.view = {pid: view[pid] for pid in agent.view}
        if paper:
            banned = list(agent.adapter.placeholder_token_ids)
            force_lengths(agent.model, list(agent.adapter.stop_token_ids), banned, args.tokens)
    # every agent's tower and gradient forwards (an agent whose advantages are all 0 runs none)
    visions = [VisionCounter(agent.model) for agent in cohort.agents]
    paddings = [PaddingCounter(agent.model) for agent in cohort.agents]

    def step() -> dict[str, Any]:
        t0 = time.perf_counter()
        metrics = cohort.step()
        total = time.perf_counter() - t0
        m = metrics["a0"]
        counts = [vision.take() for vision in visions]
        padded, computed = (sum(c) for c in zip(*(padding.take_counts() for padding in paddings)))
        lengths = [(ms["length/min"], ms["length/max"]) for ms in metrics.values()]
        return {
            "total": total,
            "rollout": m["time/rollout"],
            "reward": m["time/reward"],
            "update": m["time/update"] + m["time/sync"],
            "length_min": min(lo for lo, _ in lengths),
            "length_max": max(hi for _, hi in lengths),
            "trained_rows": sum(ms["trained_rows"] for ms in metrics.values()),
            "peak_rss_mb": peak_rss_mb(),
            "vision": {key: sum(c[key] for c in counts) for key in counts[0]},  # summed over the agents
            "padding_share": padded / computed if computed else None,  # all agents' gradient forwards
            "padding_share_metric": [ms.get("perf/padding_share") for ms in metrics.values()],  # per agent
        }

    return step


# ------------------------------------------------------------------------------------------------ processes
def _reply(proto: Any, data: dict[str, Any]) -> None:
    proto.write(json.dumps(data) + "\n")
    proto.flush()


def worker(arm: str, args: argparse.Namespace) -> None:
    """``arm`` = ``family:trl`` or ``family:corl:N:seq|par``; talks JSON lines on the original stdout."""
    import torch

    proto = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # libraries' prints go to stderr, the protocol stays clean
    torch.set_num_threads(args.threads)
    from corl_vl.paths import configure_cache_env

    configure_cache_env()
    family, kind, *rest = arm.split(":")
    if kind == "trl":
        from trl_arm import trl_arm

        trl_arm(family, args, proto, _reply)
        return
    step = corl_arm(family, int(rest[0]), rest[1] == "par", args)
    _reply(proto, {"ready": True, "peak_rss_mb": peak_rss_mb()})
    for line in sys.stdin:
        if line.strip() != "step":
            break
        _reply(proto, step())


def arm_names(family: str, args: argparse.Namespace) -> list[str]:
    modes = {"both": ["seq", "par"], "true": ["par"], "false": ["seq"]}[args.parallel]
    names = [f"{family}:trl"] if args.trl else []
    for n in [int(x) for x in args.agents.split(",")]:
        names += [f"{family}:corl:{n}:{m}" for m in (modes if n > 1 else ["seq"])]
    return names


def run_family(family: str, args: argparse.Namespace) -> dict[str, Any]:
    arms = arm_names(family, args)
    common = [
        "--threads",
        str(args.threads),
        "--k",
        str(args.k),
        "--problems",
        str(args.problems),
        "--tokens",
        str(args.tokens),
        "--pool",
        str(args.pool),
        "--shape",
        args.shape,
        "--micro-batch",
        str(args.micro_batch),
    ]
    procs = {}
    for arm in arms:  # built one at a time: build times do not overlap
        procs[arm] = subprocess.Popen(
            [sys.executable, __file__, "--_worker", arm, *common],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "OMP_NUM_THREADS": str(args.threads)},
        )
        ready = _read(procs[arm], arm)
        print(f"[{arm}] ready, rss {ready['peak_rss_mb']:.0f} MB", file=sys.stderr, flush=True)
    samples: dict[str, list[dict[str, Any]]] = {arm: [] for arm in arms}
    for r in range(args.warmup + args.steps):
        order = arms[r % len(arms) :] + arms[: r % len(arms)]  # rotate: no arm always runs first
        for arm in order:
            procs[arm].stdin.write("step\n")
            procs[arm].stdin.flush()
            sample = _read(procs[arm], arm)
            sample["round"] = r
            if r >= args.warmup:
                samples[arm].append(sample)
        print(f"[{family}] round {r + 1}/{args.warmup + args.steps}", file=sys.stderr, flush=True)
    for proc in procs.values():
        proc.stdin.write("quit\n")
        proc.stdin.close()
        proc.wait(timeout=60)
    return summarise(family, arms, samples)


def _read(proc: subprocess.Popen, arm: str) -> dict[str, Any]:
    line = proc.stdout.readline()
    if not line:
        raise SystemExit(f"{arm}: the worker exited (exit code {proc.wait()}); see its stderr above")
    return json.loads(line)


def summarise(family: str, arms: list[str], samples: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    trl = samples.get(f"{family}:trl")  # None: TRL not installed (corl-vl arms only)
    rows = []
    base_seq = None
    for arm in arms:
        got = samples[arm]
        n = 1 if arm.endswith(":trl") else int(arm.split(":")[2])
        med = {k: statistics.median(s[k] for s in got) for k in ("total", *PHASES)}
        paired = [s["total"] / t["total"] for s, t in zip(got, trl)] if trl else []
        shares = [s["padding_share"] for s in got if s.get("padding_share") is not None]
        row = {
            "arm": arm,
            "agents": n,
            "median_s": med,
            "paired_ratio_vs_trl": statistics.median(paired) if paired else None,
            "per_agent_ratio_vs_trl": statistics.median(paired) / n if paired else None,
            "vision_images_per_step": statistics.median(s.get("vision", {}).get("images", 0) for s in got),
            "vision_images_grad_per_step": statistics.median(
                s.get("vision", {}).get("images_grad", 0) for s in got
            ),
            "padding_share": statistics.median(shares) if shares else None,
            "peak_rss_mb": max(s["peak_rss_mb"] for s in got),
            "completion_length": [min(s["length_min"] for s in got), max(s["length_max"] for s in got)],
            "trained_rows": statistics.median(s["trained_rows"] for s in got),
            "samples": got,
        }
        if arm == f"{family}:corl:1:seq":
            base_seq = got
        rows.append(row)
    for row in rows:  # time(N)/N/time(1), paired per round against corl-vl N = 1
        if base_seq is not None and ":corl:" in row["arm"]:
            ratios = [s["total"] / row["agents"] / b["total"] for s, b in zip(row["samples"], base_seq)]
            row["scaling_vs_n1"] = statistics.median(ratios)
    return {"family": family, "rows": rows}


def print_table(results: list[dict[str, Any]]) -> str:
    header = [
        "family",
        "arm",
        "step s",
        "rollout s",
        "reward s",
        "update s",
        "× TRL",
        "per agent × TRL",
        "t(N)/N/t(1)",
        "peak RSS MB",
        "tokens",
        "trained rows",
        "pictures encoded (in grad passes)",
        "padding share",
    ]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for fam in results:
        for r in fam["rows"]:
            m = r["median_s"]
            scaling = r.get("scaling_vs_n1")
            lo, hi = r["completion_length"]
            ratio, per_agent, share = (
                r["paired_ratio_vs_trl"],
                r["per_agent_ratio_vs_trl"],
                r["padding_share"],
            )
            cells = [
                fam["family"],
                r["arm"].split(":", 1)[1],
                f"{m['total']:.2f}",
                f"{m['rollout']:.2f}",
                f"{m['reward']:.2f}",
                f"{m['update']:.2f}",
                "n/a" if ratio is None else f"{ratio:.2f}",
                "n/a" if per_agent is None else f"{per_agent:.2f}",
                "" if scaling is None else f"{scaling:.2f}",
                f"{r['peak_rss_mb']:.0f}",
                f"{lo:.0f}–{hi:.0f}",
                f"{r['trained_rows']:.0f}",
                f"{r['vision_images_per_step']:.0f} ({r['vision_images_grad_per_step']:.0f})",
                "n/a" if share is None else f"{100 * share:.1f} %",
            ]
            lines.append("| " + " | ".join(cells) + " |")
    text = "\n".join(lines)
    print(text)
    return text


def load_average() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--families", default="text,vl", help="comma-separated: text, vl")
    parser.add_argument("--agents", default="1,2,3", help="corl-vl cohort sizes")
    parser.add_argument(
        "--parallel",
        default="both",
        choices=("both", "true", "false"),
        help="train.parallel_agents of the N ≥ 2 arms (both: one arm each)",
    )
    parser.add_argument("--steps", type=int, default=7, help="measured rounds (default 7)")
    parser.add_argument("--warmup", type=int, default=2, help="warm-up rounds excluded (default 2)")
    parser.add_argument("--k", type=int, default=8, help="completions per problem (default 8)")
    parser.add_argument("--problems", type=int, default=4, help="problems per step (default 4)")
    parser.add_argument(
        "--tokens",
        type=int,
        help="tiny: new tokens per completion, forced (default 32); paper: the cap (1024)",
    )
    parser.add_argument("--shape", default="tiny", choices=("tiny", "paper"), help="batch shape (shapes.py)")
    parser.add_argument("--micro-batch", type=int, default=8, help="paper: rows per gradient forward (8)")
    parser.add_argument("--pool", type=int, default=64, help="synthetic problems to draw from (default 64)")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="torch threads per process")
    parser.add_argument("--out", type=Path, default=RESULTS, help=f"JSON results (default {RESULTS})")
    parser.add_argument("--_worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.tokens is None:
        args.tokens = 1024 if args.shape == "paper" else 32
    args.trl = importlib.util.find_spec("trl") is not None
    if args._worker:
        worker(args._worker, args)
        return 0
    if not args.trl:  # the corl-vl arms still run; every ratio against TRL reads n/a
        print('TRL is not installed (pip install -e ".[perf]"): corl-vl arms only', file=sys.stderr)
    before = load_average()
    results = []
    for family in [f.strip() for f in args.families.split(",") if f.strip()]:
        results.append(run_family(family, args))
        write_record(args, argv, results, before)  # after every family: a long run keeps what it measured
    print(f"load before: {before}\nload after:  {load_average()}\nwrote {args.out}")
    return 0


def write_record(args: argparse.Namespace, argv: list[str] | None, results: list[Any], before: str) -> None:
    trl = importlib.import_module("trl") if args.trl else None
    record = {
        "command": "python benchmarks/perf/vs_trl.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "settings": {k: v for k, v in vars(args).items() if k not in ("_worker", "out", "trl")},
        "trl_version": trl.__version__ if trl else "not installed",
        "load_before": before,
        "load_after": load_average(),
        "table": print_table(results),
        "results": results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(record, indent=2))
    tmp.replace(args.out)


if __name__ == "__main__":
    sys.exit(main())
