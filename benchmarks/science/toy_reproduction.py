"""Toy-scale reproduction on CPU: label-free Co-RL vs TTRL (each agent alone) vs GT reward, per skill.

Why: the paper's claim (Thm. 1, §6) — with complementary skills, peer rewards lift both agents where self-reward
amplifies each agent's own mistakes — must be visible at a scale anyone can run. Both agents start from the
same cached warm-started bases (:mod:`corl_vl.science.warm_start`): agent 0 strong on skill set S1, weak on S2, agent 1
the reverse. Every method then runs the same steps, problems and seeds through the same cohort loop
(:class:`corl_vl.train.cohort.Cohort`), differing only in the reward; TTRL and GT run both agents in one cohort, but
each agent is rewarded by itself (or the labels) alone, so they never interact.

Outputs (``--output-dir``): ``results.json`` (every eval and step metric), ``table.md`` (held-out accuracy per
agent and skill, mean ± sd over seeds, before → after), ``curves.png`` (held-out accuracy vs step per method),
``labels.png`` (peer agreement and pseudo-label accuracy vs step), ``command.txt``.

    OMP_NUM_THREADS=1 python benchmarks/science/toy_reproduction.py --seeds 0 1 2
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from corl_vl.paths import configure_cache_env  # noqa: E402

METHODS = {"co_rl": "Co-RL (peer)", "ttrl": "TTRL (self)", "gt": "GT reward"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=str(ROOT / "configs/science/toy.yaml"))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    parser.add_argument("--steps", type=int, help="override cohort train.max_steps")
    parser.add_argument("--output-dir", default=str(ROOT / "benchmarks/science/results"))
    args = parser.parse_args(argv)
    configure_cache_env()

    import torch

    from corl_vl.science.toy import (
        build_cohort,
        cohort_config,
        ensure_bases,
        heldout_set,
        load_experiment,
        run_with_heldout,
        train_problems,
    )
    from corl_vl.science.warm_start import warm_start_record

    torch.set_num_threads(1)
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    t_start = time.perf_counter()
    exp = load_experiment(args.config)
    bases = ensure_bases(exp, log_every=100)
    warm = [warm_start_record(b) for b in bases]
    heldout = heldout_set(exp)
    h = exp.heldout
    runs: list[dict[str, Any]] = []
    for seed in args.seeds:
        for method in args.methods:
            overrides = [f"train.max_steps={args.steps}"] if args.steps else []
            cfg = cohort_config(exp, bases, reward=method, seed=seed, overrides=overrides)
            cohort = build_cohort(cfg, train_problems(cfg, exp.skills, text_view=exp.text_view))
            rec = run_with_heldout(
                cohort, heldout, steps=cfg.train.max_steps, every=int(h.get("every", 0)),
                max_new_tokens=int(h.get("max_new_tokens", 10)),
            )  # fmt: skip
            runs.append({"method": method, "seed": seed, **rec})
            last = rec["evals"][-1]
            print(
                f"[{time.perf_counter() - t_start:6.0f}s] {method} seed {seed}: "
                + "  ".join(f"{a}: {last[a]['per_skill']}" for a in cfg.agent_names()),
                flush=True,
            )
            del cohort
    agents = [a["name"] for a in exp.cohort["agents"]]
    result = {
        "config": exp.source,
        "skill_sets": exp.skill_sets,
        "agents": agents,
        "warm_start": warm,
        "heldout_n": len(heldout),
        "runs": runs,
        "seconds": time.perf_counter() - t_start,
    }
    (out / "results.json").write_text(json.dumps(result, indent=1))
    (out / "table.md").write_text(table(result))
    plot_curves(result, out / "curves.png")
    plot_labels(result, out / "labels.png")
    cmd = "OMP_NUM_THREADS=1 .venv/bin/python " + " ".join(shlex.quote(a) for a in sys.argv)
    (out / "command.txt").write_text(f"{cmd}\n# wall time: {result['seconds']:.0f} s\n")
    print(table(result))
    print(f"wall time {result['seconds']:.0f} s; results in {out}")
    return 0


def _ms(values: list[float]) -> str:
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.mean(values):.3f} ± {sd:.3f}"


def table(result: dict[str, Any]) -> str:
    """Markdown: per method, agent and skill (and overall): before → after, mean ± sd over seeds."""
    agents, sets = result["agents"], result["skill_sets"]
    skills = [s for g in sets for s in g]
    seeds = sorted({r["seed"] for r in result["runs"]})
    lines = [
        f"Held-out greedy accuracy ({result['heldout_n']} test problems), mean ± sd over seeds {seeds}. "
        "Strong skills marked *.",
        "",
        "| method | agent | "
        + " | ".join(f"{s} before → after" for s in skills)
        + " | overall before → after |",
        "|---|---|" + "---|" * (len(skills) + 1),
    ]
    for method in dict.fromkeys(r["method"] for r in result["runs"]):
        runs = [r for r in result["runs"] if r["method"] == method]
        for i, agent in enumerate(agents):
            cells = []
            for skill in [*skills, None]:

                def pick(e: dict[str, Any], agent: str = agent, skill: str | None = skill) -> float:
                    return e[agent]["overall"] if skill is None else e[agent]["per_skill"][skill]

                before = [pick(r["evals"][0]) for r in runs]
                after = [pick(r["evals"][-1]) for r in runs]
                delta = statistics.mean(after) - statistics.mean(before)
                mark = "*" if skill in sets[i] else ""
                cells.append(f"{_ms(before)} → {_ms(after)} ({delta:+.3f}){mark}")
            lines.append(f"| {METHODS.get(method, method)} | {agent} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _curve(
    runs: list[dict[str, Any]], agent: str, skill: str | None
) -> tuple[list[int], list[float], list[float]]:
    steps = [e["step"] for e in runs[0]["evals"]]
    vals = [
        [(e[agent]["overall"] if skill is None else e[agent]["per_skill"][skill]) for e in r["evals"]]
        for r in runs
    ]
    mean = [statistics.mean(v) for v in zip(*vals)]
    sd = [statistics.stdev(v) if len(v) > 1 else 0.0 for v in zip(*vals)]
    return steps, mean, sd


def plot_curves(result: dict[str, Any], path: Path) -> None:
    """One panel per agent × (each skill, overall); one line per method (mean over seeds, ±sd band)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    agents, sets = result["agents"], result["skill_sets"]
    skills = [s for g in sets for s in g]
    cols = [*skills, None]
    fig, axes = plt.subplots(
        len(agents), len(cols), figsize=(4 * len(cols), 3.2 * len(agents)), squeeze=False
    )
    for i, agent in enumerate(agents):
        for j, skill in enumerate(cols):
            ax = axes[i][j]
            for method in dict.fromkeys(r["method"] for r in result["runs"]):
                runs = [r for r in result["runs"] if r["method"] == method]
                steps, mean, sd = _curve(runs, agent, skill)
                ax.plot(steps, mean, marker="o", label=METHODS.get(method, method))
                ax.fill_between(
                    steps, [m - s for m, s in zip(mean, sd)], [m + s for m, s in zip(mean, sd)], alpha=0.15
                )
            strong = " (strong)" if skill in sets[i] else (" (weak)" if skill else "")
            ax.set_title(f"{agent}: {skill or 'overall'}{strong}", fontsize=9)
            ax.set_xlabel("step")
            ax.set_ylabel("held-out accuracy")
            ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_labels(result: dict[str, Any], path: Path) -> None:
    """Peer agreement (Co-RL) and pseudo-label accuracy (Co-RL, TTRL) vs step, per agent, mean over seeds."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    agents = result["agents"]
    keys = [("label/accuracy", "pseudo-label accuracy"), ("peer/agreement", "peer agreement")]
    fig, axes = plt.subplots(1, len(keys), figsize=(5.5 * len(keys), 3.5), squeeze=False)
    for ax, (key, title) in zip(axes[0], keys):
        for method in dict.fromkeys(r["method"] for r in result["runs"]):
            runs = [r for r in result["runs"] if r["method"] == method]
            for agent in agents:
                series = [[m.get(key) for m in r["metrics"][agent]] for r in runs]
                if not any(v is not None for s in series for v in s):
                    continue
                mean = []
                for col in zip(*series):
                    vals = [v for v in col if v is not None]
                    mean.append(statistics.mean(vals) if vals else float("nan"))
                ax.plot(_smooth(mean), label=f"{METHODS.get(method, method)}: {agent}")
        ax.set_title(f"{title} (training problems, mean over seeds, 3-step moving average)", fontsize=9)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _smooth(values: list[float], width: int = 3) -> list[float]:
    out = []
    for i in range(len(values)):
        window = [v for v in values[max(0, i - width + 1) : i + 1] if v == v]
        out.append(statistics.mean(window) if window else float("nan"))
    return out


if __name__ == "__main__":
    sys.exit(main())
