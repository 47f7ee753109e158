"""Why do the agents forget their strong skill during RL? One knob per arm on the demo's experiment, per-step
held-out accuracy per skill, policy entropy and the share of clipped tokens.

Why: the toy grid at lr 2e-4 (``results/lr_2e-4/table.md``) shows every reward, ground truth included, lowering each agent's strong
skill. A drop under GT reward points at the optimisation rather than the labels, so each arm below changes one
setting of ``corl_vl.demo_config()`` (same warm-started bases from the cache, same pictures, same problems) and
repeats it over RL seeds. Each run records held-out greedy accuracy on every skill every ``--every`` steps,
``entropy`` (``train.log_entropy``), ``clip/frac`` and ``kl`` per step. The ``mix_*`` arms keep the config and
train on one skill's problems only (the cohort's problem sampler restricted after the build): the agent strong on
that skill never sees its weak skill, and the other agent never sees its strong one.

    OMP_NUM_THREADS=1 python benchmarks/science/forgetting_sweep.py --arms default lr_5e-5 --seeds 0 1 \\
        --steps 10 --every 2 --per-skill 16 --output-dir runs/forgetting/a
    python benchmarks/science/forgetting_sweep.py --merge runs/forgetting/a runs/forgetting/b \\
        --output-dir benchmarks/science/results_forgetting

Outputs (``--output-dir``): ``results.json`` (every eval and step metric per run), ``table.md`` (per arm and
agent: strong / weak / overall change, mean ± sd over seeds; entropy first → last; mean clip share and KL),
``curves.png`` (per step, mean over seeds) and ``command.txt``.
"""

from __future__ import annotations

import argparse
import json
import shlex
import shutil
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.science.forgetting_report import plot_curves, table  # noqa: E402
from corl_vl.paths import configure_cache_env  # noqa: E402

# The sweep's baseline is the demo's setting before this study changed it (lr 2e-4, no KL), so the committed
# results_forgetting/ stay reproducible now that the demo trains at lr 5e-5 with beta 1.0.
BASELINE = ["train.lr=2e-4", "grpo.beta=0.0"]
# arm → the --set overrides on corl_vl.demo_config() + BASELINE; "mix" arms also restrict the problems to one skill
ARMS: dict[str, dict[str, Any]] = {
    "default": {"set": []},
    "lr_5e-5": {"set": ["train.lr=5e-5"]},
    "lr_1e-5": {"set": ["train.lr=1e-5"]},
    "kl_0.1": {"set": ["grpo.beta=0.1"]},
    "kl_1.0": {"set": ["grpo.beta=1.0"]},
    # two optimizer steps per rollout batch: the second mini-batch's ratio ≠ 1, so the clip can act
    "updates_2": {"set": ["grpo.updates_per_batch=2"]},
    "updates_2_eps_0.05": {"set": ["grpo.updates_per_batch=2", "grpo.epsilon=0.05"]},
    "mix_figure_color": {"set": [], "skill": "figure_color"},
    "mix_ground_color": {"set": [], "skill": "ground_color"},
    "gt": {"set": ["reward.name=gt"]},
    "gt_lr_5e-5": {"set": ["reward.name=gt", "train.lr=5e-5"]},
    "gt_lr_1e-5": {"set": ["reward.name=gt", "train.lr=1e-5"]},
    "gt_kl_0.1": {"set": ["reward.name=gt", "grpo.beta=0.1"]},
    "gt_kl_1.0": {"set": ["reward.name=gt", "grpo.beta=1.0"]},
}

# what every run keeps of a step's metrics (the rest is in the run folder's metrics.jsonl)
KEPT_METRICS = (
    "step",
    "entropy",
    "clip/frac",
    "kl",
    "ratio/mean",
    "label/accuracy",
    "answer/accuracy",
    "reward/mean",
    "groups/zero_std_frac",
)


def main(argv: list[str] | None = None) -> int:
    return arm_sweep(argv, __doc__.splitlines()[0], ARMS, seeds=[0, 1], every=2, output="runs/forgetting")


def arm_sweep(
    argv: list[str] | None,
    description: str,
    arms: dict[str, dict[str, Any]],
    *,
    seeds: list[int],
    every: int,
    output: str,
    baseline: list[str] | None = None,
) -> int:
    """The command line shared by the arm sweeps (this one, loss_menu.py): every arm × RL seed of ``arms`` on
    ``baseline`` (default :data:`BASELINE`), the report rewritten after each run; ``--merge`` only combines."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--arms", nargs="+", default=list(arms), choices=list(arms))
    parser.add_argument("--seeds", type=int, nargs="+", default=seeds, help="RL seeds (train.seed)")
    parser.add_argument("--steps", type=int, default=10, help="train.max_steps")
    parser.add_argument("--every", type=int, default=every, help="held-out evaluation every N steps")
    parser.add_argument("--per-skill", type=int, default=16, help="held-out problems per skill")
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="for every arm alike")
    parser.add_argument("--output-dir", default=str(ROOT / output))
    parser.add_argument(
        "--merge", nargs="+", metavar="DIR", help="no training: combine these folders' results"
    )
    args = parser.parse_args(argv)
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    if args.merge:
        return merge([Path(f) for f in args.merge], out)
    configure_cache_env()

    import torch

    torch.set_num_threads(1)
    t_start = time.perf_counter()
    common = [
        f"train.max_steps={args.steps}",
        f"experiment.heldout.every={args.every}",
        f"experiment.heldout.per_skill={args.per_skill}",
        "train.log_entropy=true",
        "train.plot=false",
        "train.report_to=[none]",
        *args.set,
    ]
    result: dict[str, Any] = {"common": common, "arms": {a: arms[a] for a in args.arms}, "runs": []}
    for seed in args.seeds:
        for arm in args.arms:
            started = time.perf_counter()
            folder = out / "runs" / f"{arm}-seed{seed}"
            rec = run_arm(arm, seed, common, folder, arms=arms, baseline=baseline)
            rec["seconds"] = time.perf_counter() - started
            result["runs"].append(rec)
            result["seconds"] = time.perf_counter() - t_start
            write_report(result, out, f"{_command()}\n# wall time so far: {result['seconds']:.0f} s\n")
            last = rec["evals"][-1]
            print(
                f"[{result['seconds']:6.0f}s] {arm} seed {seed}: "
                + "  ".join(f"{a}: {last[a]['per_skill']}" for a in rec["agents"]),
                flush=True,
            )
    return 0


def run_arm(
    arm: str,
    seed: int,
    common: list[str],
    folder: Path,
    *,
    arms: dict[str, dict[str, Any]] | None = None,
    baseline: list[str] | None = None,
) -> dict[str, Any]:
    """One training run of ``arm`` (of ``arms``, default :data:`ARMS`, on ``baseline``, default :data:`BASELINE`)
    at RL seed ``seed``: its evals, kept step metrics and skill sets."""
    from corl_vl import demo_config
    from corl_vl.recipe import train
    from corl_vl.train.cohort import Sampler

    spec = (ARMS if arms is None else arms)[arm]
    shutil.rmtree(folder, ignore_errors=True)
    own = [f"train.seed={seed}", f"train.output_dir={folder}"]
    cfg = demo_config([*(BASELINE if baseline is None else baseline), *common, *spec["set"], *own])
    skill = spec.get("skill")

    def one_skill(cohort: Any) -> None:
        ids = [pid for pid, p in cohort.base.items() if p.meta["skill"] == skill]
        cohort.sampler = Sampler(ids, seed=cfg.train.seed, shuffle=cfg.data.shuffle)

    run = train(cfg, progress=False, prepare=one_skill if skill else None)
    metrics = {
        agent: [{k: row[k] for k in KEPT_METRICS if k in row} for row in rows]
        for agent, rows in run.history.items()
    }
    exp = cfg.experiment
    return {
        "arm": arm,
        "seed": seed,
        "agents": cfg.agent_names(),
        "skill_sets": exp.skill_sets,
        "overrides": spec["set"],
        "train_skill": skill,
        "evals": [e for e in run.evals if "step" in e],
        "metrics": metrics,
    }


def merge(folders: list[Path], out: Path) -> int:
    """One report from result folders of runs made apart (e.g. one process per group of arms)."""
    parts = [json.loads((f / "results.json").read_text()) for f in folders]
    result = {
        "common": parts[0]["common"],
        "arms": {k: v for p in parts for k, v in p["arms"].items()},
        "runs": [r for p in parts for r in p["runs"]],
        "seconds": sum(p.get("seconds", 0.0) for p in parts),
    }
    commands = [(f / "command.txt").read_text() for f in folders if (f / "command.txt").exists()]
    print(write_report(result, out, "".join(commands) + f"# merged with:\n{_command()}\n"))
    return 0


def write_report(result: dict[str, Any], out: Path, command: str) -> str:
    """results.json, table.md, curves.png and command.txt; returns the table."""
    (out / "results.json").write_text(json.dumps(result, indent=1))
    report = table(result)
    (out / "table.md").write_text(report)
    plot_curves(result, out / "curves.png")
    (out / "command.txt").write_text(command)
    return report


def _command() -> str:
    return "OMP_NUM_THREADS=1 .venv/bin/python " + " ".join(shlex.quote(a) for a in sys.argv)


if __name__ == "__main__":
    sys.exit(main())
