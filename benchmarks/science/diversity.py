"""Diversity measured before it pays: does a pair's error decoupling κ, measured on held-out problems *before*
training, predict what Co-RL gains?

Why: the paper's claim is that cohorts of different families, sizes or views make fewer correlated errors, and
that this — not ensembling — lets peer rewards work. Every cohort here is the toy of configs/science/toy.yaml
(pictures, the same warm-start recipe, RL settings, problems and seeds); only agent 1 changes, which changes how
correlated the pair's errors are. Agent 0 is always the demo's qwen (reads the circle's colour, names the next
colour for the background's):

    same_twice                 agent 1 = the same warm start (same family, same skills, same mistakes)
    same_family_seeds          tiny-qwen2.5-vl, same skills, warm-start seed 1 (other init, labels, order)
    same_family_complementary  tiny-qwen2.5-vl strong on the background (the other skill)
    other_family_same_skills   tiny-internvl3.5, same skills as agent 0
    demo                       tiny-internvl3.5 strong on the background (the demo's pair)
    paired_view                tiny-qwen2.5 (the same family's language model) reading each picture described in
                               words: the same problems in another view, same skills
    paired_view_complementary  the same, strong on the background

Before training: each base's held-out correctness → κ and the other ``corl-vl diagnose`` statistics
(:func:`corl_vl.science.diagnostics.pair_stats`), overall and per skill. Then Co-RL (mutual peer reward) for the
same steps; gains = held-out after − before, on each agent's weak skill(s) and overall, mean over the pair.

Outputs (``--output-dir``): ``results.json`` (after every run; ``--skip-done`` continues it), ``table.md``,
``gain_vs_kappa.png``, ``command.txt``.

    OMP_NUM_THREADS=1 nice -n 10 python benchmarks/science/diversity.py --seeds 0 1
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import shlex
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.science.cohort_stats import gain, spearman, weak_skills  # noqa: E402
from corl_vl.io import write_text_atomic  # noqa: E402
from corl_vl.paths import configure_cache_env  # noqa: E402

FIG, GROUND = ["figure_color"], ["ground_color"]
# name → (what differs, agent 1's name, model, its warm-start changes); agent 0 is always the demo's qwen
COHORTS: dict[str, tuple[str, str, str, dict[str, Any]]] = {
    "same_twice": ("same warm start twice", "qwen_b", "tiny-qwen2.5-vl", {}),
    "same_family_seeds": (
        "same family, same skills, warm-start seed 1",
        "qwen_b",
        "tiny-qwen2.5-vl",
        {"seed": 1, "init_seed": 1},
    ),
    "same_family_complementary": ("same family, complementary skills", "qwen_b", "tiny-qwen2.5-vl", GROUND),
    "other_family_same_skills": ("other family, same skills", "internvl", "tiny-internvl3.5", {}),
    "demo": ("other family, complementary skills (the demo)", "internvl", "tiny-internvl3.5", GROUND),
    "paired_view": ("same family, text view of the pictures, same skills", "qwen_text", "tiny-qwen2.5", {}),
    "paired_view_complementary": (
        "same family, text view, complementary skills",
        "qwen_text",
        "tiny-qwen2.5",
        GROUND,
    ),
}


def cohort_config(name: str, base: str, overrides: list[str]) -> Any:
    """The toy config with agent 1 replaced as ``COHORTS[name]`` says (strong on the circle unless GROUND)."""
    import yaml

    from corl_vl.config import apply_overrides, config_from_dict

    _, agent, model, change = COHORTS[name]
    raw = yaml.safe_load(Path(base).read_text())
    strong = change if isinstance(change, list) else FIG
    raw["agents"][1] = {"name": agent, "model": model}
    raw["experiment"]["warm_start"]["skill_sets"] = [FIG, GROUND]  # the skills of the cohort: both
    own = dict(change) if isinstance(change, dict) else {}
    if strong == FIG:  # agent 1 strong on the circle as agent 0: weak on the background
        own |= {"strong_skills": FIG, "weak_skills": GROUND}
    raw["experiment"]["agents"] = {agent: own} if own else {}
    return apply_overrides(config_from_dict(raw, source=f"{base} ({name})"), overrides)


def measure_before(cfg: Any) -> dict[str, Any]:
    """Each base's held-out accuracy (its own view) and the pair's diagnose statistics, overall and per skill."""
    from corl_vl.data.synth import to_text_problem
    from corl_vl.eval.greedy import heldout_accuracy
    from corl_vl.experiment import ensure_bases, heldout_set
    from corl_vl.science.diagnostics import pair_stats
    from corl_vl.science.warm_start import warm_start_record
    from model_adapters.registry import create_adapter

    paths = ensure_bases(cfg, log_every=0)
    heldout = heldout_set(cfg)
    results = []
    for path in paths:
        adapter = create_adapter(str(path))
        view = heldout if adapter.supports_images else [to_text_problem(p) for p in heldout]
        results.append(
            heldout_accuracy(
                adapter, adapter.load_model(), view, max_new_tokens=cfg.experiment.heldout.max_new_tokens
            )
        )
    stats = {}
    for skill in [None, *cfg.experiment.skills]:
        ids = [p.id for p in heldout if skill is None or p.meta["skill"] == skill]
        pair = pair_stats([results[0].correct[i] for i in ids], [results[1].correct[i] for i in ids])
        stats[skill or "overall"] = dataclasses.asdict(pair)
    return {
        "agents": cfg.agent_names(),
        "warm_start": [warm_start_record(p) for p in paths],
        "heldout_n": len(heldout),
        "before": {a: r.as_dict() for a, r in zip(cfg.agent_names(), results)},
        "stats": stats,
    }


def write_json(path: Path, data: Any) -> None:
    write_text_atomic(path, json.dumps(data, indent=1))  # readers never see half a results.json


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=str(ROOT / "configs/science/toy.yaml"))
    parser.add_argument("--cohorts", nargs="+", default=list(COHORTS), choices=list(COHORTS))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1], help="RL seeds")
    parser.add_argument("--steps", type=int, default=20, help="RL steps (train.max_steps), every cohort")
    parser.add_argument("--heldout", type=int, default=48, help="held-out problems per skill")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="config override")
    parser.add_argument("--output-dir", default=str(ROOT / "benchmarks/science/results_diversity"))
    parser.add_argument("--skip-done", action="store_true", help="keep cohorts and runs already measured")
    parser.add_argument("--report-only", action="store_true", help="only redraw table and figure")
    args = parser.parse_args(argv)
    configure_cache_env()
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "results.json"
    if args.report_only:
        report(json.loads(path.read_text()), out)
        return 0
    import torch

    from corl_vl.recipe import train

    torch.set_num_threads(1)
    overrides = [
        "train.plot=false",
        "train.save_every=0",
        "train.report_to=[none]",
        f"train.max_steps={args.steps}",
        f"experiment.heldout.per_skill={args.heldout}",
        f"experiment.heldout.every={args.steps}",  # before and after only
        *args.set,
    ]
    keep = args.skip_done and path.exists()
    result = json.loads(path.read_text()) if keep else {"cohorts": {}, "runs": [], "seconds": 0.0}
    result |= {"config": str(Path(args.config).resolve().relative_to(ROOT)), "overrides": overrides}
    done = {(r["cohort"], r["seed"]) for r in result["runs"]}
    t_start = time.perf_counter()
    for seed in args.seeds:  # seed-major: an interrupted run still has every cohort of the first seeds
        for name in args.cohorts:
            cfg = cohort_config(name, args.config, overrides)
            if name not in result["cohorts"]:
                result["cohorts"][name] = {"what": COHORTS[name][0], **measure_before(cfg)}
                write_json(path, result)
                print(f"[{time.perf_counter() - t_start:5.0f}s] {name}: {_summary(result['cohorts'][name])}")
            if (name, seed) in done:
                continue
            folder = out / "runs" / f"{name}-seed{seed}"
            shutil.rmtree(folder, ignore_errors=True)
            own = ["reward.name=co_rl", f"train.seed={seed}", f"train.output_dir={folder}"]
            from corl_vl.config import apply_overrides

            t0 = time.perf_counter()
            run = train(apply_overrides(copy.deepcopy(cfg), own), progress=False)
            rec = {"cohort": name, "seed": seed, "evals": run.evals, "seconds": time.perf_counter() - t0}
            result["runs"].append(rec)
            result["seconds"] += rec["seconds"]
            write_json(path, result)
            print(f"[{time.perf_counter() - t_start:5.0f}s] {name} seed {seed}: {run.evals[-1]}", flush=True)
            shutil.rmtree(
                folder, ignore_errors=True
            )  # checkpoints are not kept: results.json holds the evals
            del run
    report(result, out)
    cmd = "OMP_NUM_THREADS=1 nice -n 10 .venv/bin/python " + " ".join(shlex.quote(a) for a in sys.argv)
    (out / "command.txt").write_text(f"{cmd}\n# run time of the RL runs: {result['seconds']:.0f} s\n")
    return 0


def _summary(cohort: dict[str, Any]) -> str:
    acc = {a: r["per_skill"] for a, r in cohort["before"].items()}
    return f"kappa {cohort['stats']['overall']['kappa']}  before {acc}"


# ------------------------------------------------------------------------------------------------ report
def cohort_rows(result: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per cohort: its before-training statistics and its gains (mean over the RL seeds run)."""
    rows = []
    for name, c in result["cohorts"].items():
        runs = [r for r in result["runs"] if r["cohort"] == name]
        weak = [weak_skills(w) for w in c["warm_start"]]
        per_seed_weak = [
            statistics.mean(gain(r["evals"], a, w) for a, w in zip(c["agents"], weak)) for r in runs
        ]
        per_seed_all = [statistics.mean(gain(r["evals"], a) for a in c["agents"]) for r in runs]
        rows.append(
            {
                "cohort": name,
                "what": c["what"],
                "stats": c["stats"],
                "weak": weak,
                "before": c["before"],
                "seeds": [r["seed"] for r in runs],
                "weak_gain": per_seed_weak,
                "overall_gain": per_seed_all,
                "agent_weak_gain": {
                    a: [gain(r["evals"], a, w) for r in runs] for a, w in zip(c["agents"], weak)
                },
            }
        )
    return rows


def _f(x: float | None) -> str:
    return "–" if x is None else f"{x:+.2f}"


def _ms(values: list[float]) -> str:
    if not values:
        return "–"
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.mean(values):+.3f} ± {sd:.3f}"


def correlations(rows: list[dict[str, Any]]) -> dict[str, float | None]:
    """Spearman's ρ between κ (overall, before training) and each gain, over cohorts with runs and a κ."""
    use = [r for r in rows if r["weak_gain"] and r["stats"]["overall"]["kappa"] is not None]
    kappas = [r["stats"]["overall"]["kappa"] for r in use]
    return {
        "n": len(use),
        "weak_gain": spearman(kappas, [statistics.mean(r["weak_gain"]) for r in use]),
        "overall_gain": spearman(kappas, [statistics.mean(r["overall_gain"]) for r in use]),
    }


def table(result: dict[str, Any]) -> str:
    rows = cohort_rows(result)
    rho = correlations(rows)
    head = (
        f"Before training, on {next(iter(result['cohorts'].values()))['heldout_n']} held-out pictures (half per "
        "skill): the pair's Cohen κ of per-problem correctness, error overlap (Jaccard of the error sets), "
        "complementarity c (% of problems exactly one agent gets right), each agent's accuracy; κ also per skill. "
        "After Co-RL: gain on each agent's weak skill and overall (mean of the two agents), mean ± sd over RL "
        f"seeds. Settings: `{result['config']}` with {', '.join(result['overrides'])}."
    )
    lines = [
        head,
        "",
        "| cohort | what differs | κ ± se | κ circle | κ background | overlap | c | acc before (agent 0 / 1) "
        "| weak-skill gain | overall gain | weak gain per agent | seeds |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        s = r["stats"]
        acc = " / ".join(f"{b['overall']:.2f}" for b in r["before"].values())
        per_agent = " / ".join(_ms(v) for v in r["agent_weak_gain"].values())
        lines.append(
            f"| {r['cohort']} | {r['what']} | {_f(s['overall']['kappa'])} ± {s['overall']['kappa_se'] or 0:.2f} | "
            f"{_f(s['figure_color']['kappa'])} | "
            f"{_f(s['ground_color']['kappa'])} | {s['overall']['error_overlap'] or 0:.2f} | "
            f"{s['overall']['complementarity']:.1f} | {acc} | {_ms(r['weak_gain'])} | {_ms(r['overall_gain'])} "
            f"| {per_agent} | {r['seeds']} |"
        )
    lines += [
        "",
        f"Spearman ρ(κ before, gain) over the {rho['n']} cohorts with runs: weak-skill gain "
        f"{_f(rho['weak_gain'])}, overall gain {_f(rho['overall_gain'])} (negative: more decoupled errors, "
        "larger gain).",
    ]
    return "\n".join(lines) + "\n"


def plot(result: dict[str, Any], path: Path) -> None:
    """Gain (weak skill, overall) against κ before training; one point per cohort, bars = range over seeds."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in cohort_rows(result) if r["weak_gain"] and r["stats"]["overall"]["kappa"] is not None]
    rho = correlations(rows)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for ax, key, title in (
        (axes[0], "weak_gain", "weak-skill gain"),
        (axes[1], "overall_gain", "overall gain"),
    ):
        for r in rows:
            k, g = r["stats"]["overall"]["kappa"], r[key]
            m = statistics.mean(g)
            ax.errorbar(k, m, yerr=[[m - min(g)], [max(g) - m]], fmt="o", capsize=3)
            ax.annotate(r["cohort"], (k, m), fontsize=7, xytext=(4, 3), textcoords="offset points")
        ax.axhline(0, color="k", lw=0.6)
        ax.set_xlabel("κ between the bases (held-out, before training)")
        ax.set_ylabel(f"{title} after Co-RL (mean of the pair)")
        ax.set_title(f"{title}: Spearman ρ = {_f(rho[key])} (n = {rho['n']})", fontsize=10)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def report(result: dict[str, Any], out: Path) -> None:
    text = table(result)
    (out / "table.md").write_text(text)
    if result["runs"]:
        plot(result, out / "gain_vs_kappa.png")
    print(text)


if __name__ == "__main__":
    sys.exit(main())
