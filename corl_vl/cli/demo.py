"""``corl-vl demo``: the main job — the library's claim in miniature, on CPU, in minutes.

Why not just ``corl-vl train --config configs/demo.yaml``: random tiny models are right on nothing, so their peer
votes are noise and a newcomer would see noise. The demo first warm-starts the two tiny models of different
families on *labelled* synthetic problems with complementary skills (built once, then cached): agent 0 right on
S1 and *systematically* wrong on S2 (most of its S2 labels follow a consistent wrong rule), agent 1 the reverse
— the self-consistent errors self-reward would reinforce. It measures each agent's held-out accuracy per skill
BEFORE, trains them label-free with Co-RL (peer rewards) through the normal cohort trainer, and measures AFTER.
The full comparison with TTRL and GT reward over seeds is benchmarks/science/ (same bases, same problems).

    corl-vl demo                          # configs/science/demo_warm.yaml → runs/demo
    corl-vl demo --max-steps 4 --fast     # smaller everything: a smoke run
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from corl_vl.errors import CorlError
from corl_vl.paths import project_root

DEFAULT_CONFIG = "configs/science/demo_warm.yaml"


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "demo",
        help="the main job: warm-started tiny cohort, held-out accuracy before/after label-free Co-RL",
        description="Warm-start two tiny models with complementary skills (cached), then train them with "
        "label-free Co-RL and print each agent's held-out accuracy per skill before and after.",
    )
    parser.add_argument("--config", default=None, help=f"experiment YAML (default {DEFAULT_CONFIG})")
    parser.add_argument(
        "--output-dir", default="runs/demo", help="run folder (a free name is picked if taken)"
    )
    parser.add_argument("--max-steps", type=int, help="Co-RL steps (default: the config's train.max_steps)")
    parser.add_argument(
        "--fast",
        action="store_true",
        help="2 Co-RL steps, few held-out problems: a smoke run (not meaningful); the demo's own cached bases",
    )
    parser.add_argument(
        "--text-view",
        action="store_true",
        help="ablation: show the models the pictures described in words instead of the pictures",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.set_defaults(func=run)


FAST_HELDOUT = 8
FAST_STEPS = 2


def _config_path(arg: str | None) -> Path:
    if arg:
        return Path(arg)
    root = project_root()
    if root is None or not (root / DEFAULT_CONFIG).exists():
        raise CorlError(f"{DEFAULT_CONFIG} not found: run from a source checkout or pass --config")
    return root / DEFAULT_CONFIG


def _free_dir(path: Path) -> Path:
    """``path`` if it is missing or empty, else the first free ``path-N`` (never overwrite a previous run)."""
    if not path.exists() or not any(path.iterdir()):
        return path
    n = 1
    while (candidate := path.with_name(f"{path.name}-{n}")).exists():
        n += 1
    return candidate


def run(args: argparse.Namespace) -> int:
    # lazy: PIL, cli-help
    from corl_vl.config import load_config
    from corl_vl.experiment import heldout_set
    from corl_vl.recipe import train

    t0 = time.perf_counter()
    out = _free_dir(Path(args.output_dir))
    overrides = [f"train.output_dir={out}", "train.plot=true"]
    if args.fast:  # same bases as the full demo: one cache entry per agent serves both
        overrides.append(f"experiment.heldout.per_skill={FAST_HELDOUT}")
    if args.text_view:
        overrides.append("experiment.warm_start.text_view=true")
    steps = args.max_steps or (FAST_STEPS if args.fast else None)
    if steps:
        overrides.append(f"train.max_steps={steps}")
    cfg = load_config(_config_path(args.config), overrides)
    if cfg.experiment is None:
        raise CorlError(f"{args.config}: the demo needs an experiment: section (warm start and held-out set)")
    exp = cfg.experiment
    view = "the pictures described in words (--text-view ablation)" if exp.text_view else "pictures"
    print(f"problems are shown as {view}")
    print(
        f"label-free Co-RL for {cfg.train.max_steps} steps (labels hidden; rewards = peers' majority), held-out "
        f"accuracy before and after ({len(heldout_set(cfg))} test problems, greedy) …"
    )
    run = train(cfg, progress=not args.no_progress)
    names = [a.name for a in cfg.agents]
    before, after = run.evals[0], run.evals[-1]
    record = {
        "skill_sets": exp.skill_sets,
        "bases": [str(b) for b in _bases(cfg)],
        "before": {k: before[k] for k in names},
        "after": {k: after[k] for k in names},
        "steps": cfg.train.max_steps,
        "seconds": round(time.perf_counter() - t0, 1),
    }
    (out / "before_after.json").write_text(json.dumps(record, indent=1))
    table = before_after_table(record, names)
    (out / "before_after.md").write_text(table)
    plot_before_after(record, names, out / "plots" / "heldout_before_after.png")
    examples = save_examples(heldout_set(cfg), out / "plots")
    print()
    print(table)
    plots = out / "plots"
    print(f"before/after bars: {plots / 'heldout_before_after.png'}")
    if examples:
        print(f"example problems:  {', '.join(str(p) for p in examples)}")
    print(
        f"training curves:   {plots / 'label_accuracy.png'} (peer pseudo-label accuracy), "
        f"{plots / 'peer_agreement.png'}, {plots / 'reward_mean.png'} … (all in {plots})"
    )
    print(f"total {record['seconds']:.0f} s; run folder: {out}")
    if args.fast:
        print("(--fast: 2 steps and few held-out problems — a smoke run, the numbers mean nothing)")
    return 0


def _bases(cfg: Any) -> list[Path]:
    # lazy: PIL, numpy, tokenizers
    from corl_vl.experiment import warm_start_specs
    from corl_vl.science.warm_start import warm_start_dir

    return [warm_start_dir(spec) for spec in warm_start_specs(cfg)]


def save_examples(problems: list[Any], folder: Path) -> list[Path]:
    """The first held-out picture of each skill as ``example_<skill>.png`` (none for the text ablation)."""
    # lazy: PIL
    from corl_vl.data.images import open_image

    saved: dict[str, Path] = {}
    for problem in problems:
        skill = str(problem.meta.get("skill"))
        if skill in saved or not problem.images:
            continue
        folder.mkdir(parents=True, exist_ok=True)
        saved[skill] = folder / f"example_{skill}.png"
        open_image(problem.images[0]).save(saved[skill])
    return list(saved.values())


def before_after_table(record: dict[str, Any], agents: list[str]) -> str:
    """A plain-text table: one row per agent and skill (strong ones marked *), before → after and the change."""
    sets = record["skill_sets"]
    skills = [s for g in sets for s in g]
    rows = [["agent", "skill", "before", "after", "change"]]
    for i, agent in enumerate(agents):
        for skill in [*skills, "overall"]:
            b = record["before"][agent]
            a = record["after"][agent]
            vb = b["overall"] if skill == "overall" else b["per_skill"][skill]
            va = a["overall"] if skill == "overall" else a["per_skill"][skill]
            label = skill + (" (strong)" if skill in sets[i] else " (weak)" if skill != "overall" else "")
            rows.append([agent, label, f"{vb:.3f}", f"{va:.3f}", f"{va - vb:+.3f}"])
    widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip() for r in rows) + "\n"


def plot_before_after(record: dict[str, Any], agents: list[str], path: Path) -> None:
    """Grouped bars: held-out accuracy per agent and skill, before and after Co-RL."""
    # lazy: matplotlib
    import matplotlib

    matplotlib.use("Agg")
    # lazy: matplotlib
    import matplotlib.pyplot as plt

    skills = [s for g in record["skill_sets"] for s in g] + ["overall"]
    fig, axes = plt.subplots(1, len(agents), figsize=(4.5 * len(agents), 3.4), squeeze=False)
    for ax, agent in zip(axes[0], agents):
        for offset, (when, color) in enumerate((("before", "#999999"), ("after", "#1f77b4"))):
            r = record[when][agent]
            vals = [r["overall"] if s == "overall" else r["per_skill"][s] for s in skills]
            ax.bar([x + 0.38 * offset for x in range(len(skills))], vals, width=0.36, color=color, label=when)
        ax.set_xticks([x + 0.19 for x in range(len(skills))], skills, fontsize=8)
        ax.set_ylim(0, 1)
        ax.set_title(f"{agent}: held-out accuracy", fontsize=9)
        ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
