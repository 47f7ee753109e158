"""Three-agent toy: does weighting peers by label-free reliability protect a cohort from a collapsed member?

Why: with N ≥ 3 every peer's vote counts the same, so one agent that answers the same thing to everything
(here: ``\\boxed{3}``) adds K unanimous wrong votes to every label it takes part in. Two complementary agents
(configs/science/toy3_collapsed.yaml; the bases of the 2-agent toy) and the collapsed one train with the same
problems, order and seeds under six arms that differ only in supervision:

    ring          agent i ← agent i+1 (uniform)        uniform       all peers, every vote counts 1
    agreement     all peers, weighted by agreement     dawid_skene   all peers, weighted by Dawid–Skene EM
    ttrl          each agent its own majority          gt            gold labels (reference)
    dawid_skene_soft (on request): Dawid–Skene weights with the soft peer reward

Outputs (``--output-dir``): ``results.json`` (written after every run; ``--skip-done`` continues it),
``table.md``, ``curves.png`` (held-out accuracy vs step), ``reliability.png`` (estimated reliability vs actual
sample accuracy), ``labels.png`` (pseudo-label accuracy each weighting would give on the same answers),
``command.txt``.

    OMP_NUM_THREADS=1 nice -n 10 python benchmarks/science/three_agents.py --seeds 0 1 2

Any cohort whose last agent is the collapsed one runs the same way, e.g. four agents (three sound, one collapsed):

    OMP_NUM_THREADS=1 nice -n 10 python benchmarks/science/three_agents.py \
        --config configs/science/toy4_collapsed.yaml --output-dir benchmarks/science/results_four_agents \
        --arms uniform agreement dawid_skene dawid_skene_soft gt ttrl --seeds 0 1 2
"""

from __future__ import annotations

import argparse
import copy
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

from benchmarks.science.cohort_stats import gain, kept_share, weak_skills  # noqa: E402
from corl_vl.config import apply_overrides  # noqa: E402
from corl_vl.io import write_text_atomic  # noqa: E402
from corl_vl.paths import configure_cache_env  # noqa: E402

ARMS: dict[str, tuple[str, list[str]]] = {
    "ring": ("co_rl", ["reward.topology=ring"]),
    "uniform": ("co_rl", ["reward.topology=all_peers", "reward.weighting=uniform"]),
    "agreement": ("co_rl", ["reward.topology=all_peers", "reward.weighting=agreement"]),
    "dawid_skene": ("co_rl", ["reward.topology=all_peers", "reward.weighting=dawid_skene"]),
    "ttrl": ("ttrl", []),
    "gt": ("gt", []),
    # extra arm (not in the default list): Dawid–Skene weights with the soft peer reward
    "dawid_skene_soft": (
        "co_rl",
        ["reward.topology=all_peers", "reward.weighting=dawid_skene", "reward.peer_reward=soft"],
    ),
}
DEFAULT_ARMS = ["ring", "uniform", "agreement", "dawid_skene", "ttrl", "gt"]
WEIGHTINGS = ("uniform", "agreement", "dawid_skene")


def write_json(path: Path, data: Any) -> None:
    write_text_atomic(path, json.dumps(data, indent=1))  # readers never see half a results.json


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=str(ROOT / "configs/science/toy3_collapsed.yaml"))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--arms", nargs="+", default=DEFAULT_ARMS, choices=list(ARMS))
    parser.add_argument("--steps", type=int, help="override cohort train.max_steps")
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="override a config key; repeatable"
    )
    parser.add_argument("--output-dir", default=str(ROOT / "benchmarks/science/results_three_agents"))
    parser.add_argument("--skip-done", action="store_true", help="keep runs already in results.json")
    parser.add_argument("--report-only", action="store_true", help="only redraw table and plots")
    args = parser.parse_args(argv)
    configure_cache_env()
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    result_path = out / "results.json"
    if args.report_only:
        if not result_path.exists():
            print(f"three_agents.py: error: {result_path} not found: run the arms first", file=sys.stderr)
            return 2
        report(json.loads(result_path.read_text()), out)
        return 0

    import torch

    from corl_vl.config import load_config
    from corl_vl.experiment import ensure_bases, heldout_set
    from corl_vl.recipe import train
    from corl_vl.science.warm_start import warm_start_record

    torch.set_num_threads(1)
    t_start = time.perf_counter()
    base_overrides = ["train.plot=false", "train.report_to=[none]"]
    if args.steps:
        base_overrides.append(f"train.max_steps={args.steps}")
    base_overrides += args.set
    cfg = load_config(args.config, base_overrides)
    exp = cfg.experiment
    paths = ensure_bases(cfg)
    heldout = heldout_set(cfg)
    previous = json.loads(result_path.read_text()) if args.skip_done and result_path.exists() else None
    result: dict[str, Any] = {
        "config": str(Path(args.config).resolve().relative_to(ROOT)),
        "overrides": args.set,
        "skill_sets": exp.skill_sets,
        "agents": cfg.agent_names(),
        "warm_start": [warm_start_record(p) for p in paths],
        "heldout_n": len(heldout),
        "runs": list(previous["runs"]) if previous else [],
        "seconds": previous.get("seconds", 0.0) if previous else 0.0,
    }
    done = {(r["method"], r["seed"]) for r in result["runs"]}
    for seed in args.seeds:  # seed-major: an interrupted run still has every arm of the first seeds
        for arm in args.arms:
            if (arm, seed) in done:
                continue
            reward, overrides = ARMS[arm]
            folder = out / "runs" / f"{arm}-seed{seed}"
            shutil.rmtree(folder, ignore_errors=True)
            own = [*overrides, f"reward.name={reward}", f"train.seed={seed}", f"train.output_dir={folder}"]
            t0 = time.perf_counter()
            run = train(apply_overrides(copy.deepcopy(cfg), own), progress=False)
            rec = {"evals": run.evals, "metrics": run.history, "seconds": time.perf_counter() - t0}
            result["runs"].append({"method": arm, "seed": seed, **rec})
            result["seconds"] += time.perf_counter() - t0
            write_json(result_path, result)
            last = rec["evals"][-1]
            print(
                f"[{time.perf_counter() - t_start:6.0f}s] {arm} seed {seed}: "
                + "  ".join(f"{a}: {last[a]['per_skill']}" for a in result["agents"]),
                flush=True,
            )
            del run
    report(result, out)
    cmd = "OMP_NUM_THREADS=1 nice -n 10 .venv/bin/python " + " ".join(shlex.quote(a) for a in sys.argv)
    (out / "command.txt").write_text(
        f"{cmd}\n# run time of the arms: {result['seconds']:.0f} s on a 2-core CPU shared with other jobs\n"
    )
    return 0


# ------------------------------------------------------------------------------------------------ report
def _ms(values: list[float]) -> str:
    if not values:
        return "–"
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.mean(values):.3f} ± {sd:.3f}"


def _runs(result: dict[str, Any], arm: str) -> list[dict[str, Any]]:
    return [r for r in result["runs"] if r["method"] == arm]


def _metric_mean(run: dict[str, Any], agent: str, key: str, steps: slice) -> float | None:
    vals = [m[key] for m in run["metrics"][agent][steps] if key in m]
    return statistics.mean(vals) if vals else None


def kept_table(result: dict[str, Any]) -> str:
    """Per arm and sound agent (all but the last, collapsed one): its gain (weak skills; overall for an agent
    without weak skills) and the share of GT reward's gain it keeps, on the seeds both arms ran."""
    agents = result["agents"][:-1]
    weak = {a: weak_skills(w) or None for a, w in zip(result["agents"], result["warm_start"])}
    gt = {r["seed"]: r for r in _runs(result, "gt")}
    arms = [a for a in dict.fromkeys(r["method"] for r in result["runs"]) if a != "gt"]
    lines = [
        "Share of GT reward's gain kept, per sound agent: gain on its weak skill(s) (overall for an agent with "
        "none, marked °) of the arm / of GT, mean over the seeds both ran; ✓ when ≥ 0.8 for every agent whose GT "
        "gain is positive (n/a: GT gained nothing, e.g. already at 1.0).",
        "",
        "| arm | " + " | ".join(f"{a}{'' if weak[a] else '°'}" for a in agents) + " | all ≥ 0.8 |",
        "|---|" + "---|" * (len(agents) + 1),
    ]
    for arm in arms:
        runs = [r for r in _runs(result, arm) if r["seed"] in gt]
        if not runs:
            continue
        cells, ok = [], True
        for a in agents:
            mine = [gain(r["evals"], a, weak[a]) for r in runs]
            ref = [gain(gt[r["seed"]]["evals"], a, weak[a]) for r in runs]
            share = kept_share(mine, ref)
            ok = ok and (share is None or share >= 0.8)  # None: GT gained nothing (at the ceiling), no share
            kept = "n/a" if share is None else f"{share:.2f}"
            cells.append(f"{statistics.mean(mine):+.3f} / {statistics.mean(ref):+.3f} = {kept}")
        lines.append(f"| {arm} ({len(runs)}) | " + " | ".join(cells) + f" | {'✓' if ok else '✗'} |")
    return "\n".join(lines) + "\n"


def report(result: dict[str, Any], out: Path) -> None:
    (out / "table.md").write_text(table(result) + "\n" + kept_table(result))
    plot_curves(result, out / "curves.png")
    plot_reliability(result, out / "reliability.png")
    plot_labels(result, out / "labels.png")
    print(table(result) + "\n" + kept_table(result))


def table(result: dict[str, Any]) -> str:
    agents, sets = result["agents"], result["skill_sets"]
    skills = [s for g in sets for s in g]
    arms = list(dict.fromkeys(r["method"] for r in result["runs"]))
    seeds = sorted({r["seed"] for r in result["runs"]})
    lines = [
        f"Held-out greedy accuracy ({result['heldout_n']} test problems), mean ± sd over seeds {seeds} "
        "(runs per arm in brackets); start → end of training. Strong skills marked *. The last agent is "
        "the collapsed one."
        + (
            f" Config `{result['config']}` with {', '.join(result['overrides'])}."
            if result.get("overrides")
            else ""
        ),
        "",
        "| arm | agent | " + " | ".join(skills) + " | overall |",
        "|---|---|" + "---|" * (len(skills) + 1),
    ]
    for arm in arms:
        runs = _runs(result, arm)
        for i, agent in enumerate(agents):
            cells = []
            for skill in [*skills, None]:

                def pick(e: dict[str, Any], agent: str = agent, skill: str | None = skill) -> float:
                    return e[agent]["overall"] if skill is None else e[agent]["per_skill"][skill]

                before = statistics.mean(pick(r["evals"][0]) for r in runs)
                after = [pick(r["evals"][-1]) for r in runs]
                cells.append(f"{before:.3f} → {_ms(after)}{'*' if skill in sets[i] else ''}")
            lines.append(f"| {arm} ({len(runs)}) | {agent} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "Training problems, monitoring only (gold never enters a reward except in `gt`): per agent, its actual "
        "sample accuracy and the reliability each estimator gives it (moving average), first step → last step; "
        "pseudo-label accuracy over labelled problems (coverage) that each weighting would give on the same "
        "answers, mean over steps — in the all-peers arms.",
        "",
        "| arm | agent | actual accuracy | agreement estimate | Dawid–Skene estimate | "
        + " | ".join(f"labels: {w}" for w in WEIGHTINGS)
        + " |",
        "|---|---|---|---|---|" + "---|" * len(WEIGHTINGS),
    ]
    for arm in [a for a in arms if a in WEIGHTINGS]:
        runs = _runs(result, arm)
        for agent in agents:
            cells = []
            for key in ("answer/accuracy", "reliability/agreement", "reliability/dawid_skene"):
                first = [v for r in runs if (v := _metric_mean(r, agent, key, slice(0, 1))) is not None]
                last = [v for r in runs if (v := _metric_mean(r, agent, key, slice(-1, None))) is not None]
                cells.append(f"{_mean(first)} → {_mean(last)}")
            for w in WEIGHTINGS:
                acc = [v for r in runs if (v := _metric_mean(r, agent, f"label/accuracy_{w}", slice(None)))]
                cov = [v for r in runs if (v := _metric_mean(r, agent, f"label/coverage_{w}", slice(None)))]
                cells.append(f"{_mean(acc)} ({_mean(cov)})")
            lines.append(f"| {arm} | {agent} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _mean(values: list[float]) -> str:
    return f"{statistics.mean(values):.2f}" if values else "–"


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_curves(result: dict[str, Any], path: Path) -> None:
    """Rows: agents; columns: each skill and overall; one line per arm (mean over seeds, ±sd band)."""
    plt = _plt()
    agents, sets = result["agents"], result["skill_sets"]
    cols = [*[s for g in sets for s in g], None]
    fig, axes = plt.subplots(len(agents), len(cols), figsize=(4 * len(cols), 3 * len(agents)), squeeze=False)
    for i, agent in enumerate(agents):
        for j, skill in enumerate(cols):
            ax = axes[i][j]
            for arm in dict.fromkeys(r["method"] for r in result["runs"]):
                runs = _runs(result, arm)
                steps = [e["step"] for e in runs[0]["evals"]]
                vals = [
                    [
                        e[agent]["overall"] if skill is None else e[agent]["per_skill"][skill]
                        for e in r["evals"]
                    ]
                    for r in runs
                ]
                mean = [statistics.mean(v) for v in zip(*vals)]
                sd = [statistics.stdev(v) if len(v) > 1 else 0.0 for v in zip(*vals)]
                ax.plot(steps, mean, marker="o", ms=3, label=arm)
                ax.fill_between(
                    steps, [m - s for m, s in zip(mean, sd)], [m + s for m, s in zip(mean, sd)], alpha=0.1
                )
            kind = " (strong)" if skill in sets[i] else ""
            ax.set_title(f"{agent}: {skill or 'overall'}{kind}", fontsize=9)
            ax.set_ylim(-0.02, 1.02)
            ax.grid(alpha=0.3)
            if i == len(agents) - 1:
                ax.set_xlabel("step")
    axes[0][0].legend(fontsize=7)
    fig.suptitle("held-out accuracy vs step (mean over seeds)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _series(runs: list[dict[str, Any]], agent: str, key: str) -> list[float]:
    cols = zip(*[[m.get(key, float("nan")) for m in r["metrics"][agent]] for r in runs])
    out = []
    for col in cols:
        vals = [v for v in col if v == v]
        out.append(statistics.mean(vals) if vals else float("nan"))
    return out


def plot_reliability(result: dict[str, Any], path: Path) -> None:
    """Per all-peers arm and agent: actual sample accuracy vs the two estimates, per step (mean over seeds)."""
    plt = _plt()
    arms = [a for a in WEIGHTINGS if _runs(result, a)]
    agents = result["agents"]
    if not arms:
        return
    fig, axes = plt.subplots(
        len(arms), len(agents), figsize=(4 * len(agents), 2.8 * len(arms)), squeeze=False
    )
    keys = (
        ("answer/accuracy", "actual (gold)", "k-"),
        ("reliability/agreement", "agreement", "C0--"),
        ("reliability/dawid_skene", "Dawid–Skene", "C3--"),
    )
    for r, arm in enumerate(arms):
        for c, agent in enumerate(agents):
            ax = axes[r][c]
            for key, label, style in keys:
                ax.plot(_series(_runs(result, arm), agent, key), style, label=label)
            ax.set_title(f"{arm} arm: {agent}", fontsize=9)
            ax.set_ylim(-0.02, 1.02)
            ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=7)
    fig.suptitle(
        "per-agent reliability: estimated (label-free, moving average) vs actual sample accuracy", fontsize=10
    )
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot_labels(result: dict[str, Any], path: Path) -> None:
    """Per all-peers arm and agent: the pseudo-label accuracy each weighting would give on that arm's answers."""
    plt = _plt()
    arms = [a for a in WEIGHTINGS if _runs(result, a)]
    agents = result["agents"]
    if not arms:
        return
    fig, axes = plt.subplots(
        len(arms), len(agents), figsize=(4 * len(agents), 2.8 * len(arms)), squeeze=False
    )
    for r, arm in enumerate(arms):
        for c, agent in enumerate(agents):
            ax = axes[r][c]
            for w in WEIGHTINGS:
                ax.plot(_series(_runs(result, arm), agent, f"label/accuracy_{w}"), label=w)
            ax.set_title(f"{arm} arm: labels for {agent}", fontsize=9)
            ax.set_ylim(-0.02, 1.02)
            ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=7)
    fig.suptitle("pseudo-label accuracy by weighting, on the same answers (labelled problems)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
