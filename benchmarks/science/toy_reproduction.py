"""Toy-scale reproduction on CPU: label-free Co-RL vs TTRL (each agent alone) vs GT reward, per skill, from pictures.

Why: the paper's claim (Thm. 1, §6) — with complementary skills, peer rewards lift both agents where self-reward
amplifies each agent's own mistakes — must be visible at a scale anyone can run, and on the VLM path (vision
tower, image tokens) the library exists for. Both agents start from cached warm-started bases
(:mod:`corl_vl.science.warm_start`): agent 0 strong on skill set S1 and systematically wrong on S2, agent 1 the
reverse. Every method then runs the same steps, problems and seeds through the same cohort loop, differing only in
the reward; TTRL and GT run both agents in one cohort, but each agent is rewarded by itself (or the labels) alone.
The whole grid repeats for every warm-start seed (other random init, label subset and batch order), so the
reported sd covers the bases too.

Outputs (``--output-dir``): ``results.json`` (every eval, step metric, weight change and base record), ``table.md``
(held-out accuracy before → after, mean ± sd over warm-start × RL seeds; then the evidence that vision is used:
relative weight change per tower, accuracy with blanked pictures, κ between the bases), ``curves.png``,
``labels.png`` (peer agreement and pseudo-label accuracy vs step), ``command.txt``.

    OMP_NUM_THREADS=1 python benchmarks/science/toy_reproduction.py --base-seeds 0 1 --seeds 0 1 2
    OMP_NUM_THREADS=1 python benchmarks/science/toy_reproduction.py --text-view   # ablation: pictures in words
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import shlex
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.science.toy_report import METHODS, evidence, plot_curves, plot_labels, table  # noqa: E402
from corl_vl.paths import configure_cache_env  # noqa: E402
from corl_vl.train.loop import Callback  # noqa: E402


def _shown(path: str) -> str:
    """A config path as the results record it: relative to the repo when inside it (no machine's folders)."""
    full = Path(path).resolve()
    return str(full.relative_to(ROOT)) if full.is_relative_to(ROOT) else path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=str(ROOT / "configs/science/toy.yaml"))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="RL seeds")
    parser.add_argument("--base-seeds", type=int, nargs="+", default=[0, 1], help="warm-start seeds")
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    parser.add_argument("--steps", type=int, help="override cohort train.max_steps")
    parser.add_argument("--heldout", type=int, help="override heldout.per_skill (test problems per skill)")
    parser.add_argument("--every", type=int, help="override heldout.every (evaluate every N steps)")
    parser.add_argument(
        "--text-view", action="store_true", help="ablation: the pictures described in words (no pixels)"
    )
    parser.add_argument("--output-dir", default=str(ROOT / "benchmarks/science/results"))
    parser.add_argument(
        "--merge",
        nargs="+",
        metavar="DIR",
        help="no training: combine the results.json of runs made apart (e.g. one process per warm-start seed)",
    )
    args = parser.parse_args(argv)
    if args.merge:
        return merge(args.merge, Path(args.output_dir))
    configure_cache_env()

    import torch

    from corl_vl.config import load_config

    torch.set_num_threads(1)
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    t_start = time.perf_counter()
    overrides = ["train.plot=false", "train.save_every=0", "train.report_to=[none]"]
    if args.text_view:
        overrides.append("experiment.warm_start.text_view=true")
    if args.heldout:
        overrides.append(f"experiment.heldout.per_skill={args.heldout}")
    if args.every is not None:
        overrides.append(f"experiment.heldout.every={args.every}")
    if args.steps:
        overrides.append(f"train.max_steps={args.steps}")
    cfg = load_config(args.config, overrides)
    exp = cfg.experiment
    bases_records: list[dict[str, Any]] = []
    runs: list[dict[str, Any]] = []

    def save(final: bool = False) -> str:
        """Write everything measured so far (an interrupted grid still leaves honest partial results)."""
        result = {
            "config": _shown(args.config),
            "text_view": exp.text_view,
            "skill_sets": exp.skill_sets,
            "agents": cfg.agent_names(),
            "heldout_n": bases_records[0]["heldout_n"],
            "bases": bases_records,
            "runs": runs,
            "complete": final,
            "seconds": time.perf_counter() - t_start,
        }
        status = "" if final else f"# partial: {len(runs)} runs so far\n"
        return write_report(result, out, f"{_command()}\n# wall time: {result['seconds']:.0f} s\n{status}")

    for base_seed in args.base_seeds:
        run_base(cfg, base_seed, args, t_start, bases_records, runs, save)
    print(save(final=True))
    print(f"wall time {time.perf_counter() - t_start:.0f} s; results in {out}")
    return 0


def merge(folders: list[str], out: Path) -> int:
    """One report from several result folders of the same experiment (their bases and runs concatenated)."""
    parts = [json.loads((Path(f) / "results.json").read_text()) for f in folders]
    result = dict(parts[0])
    # one record per warm-start seed: processes that shared a seed evaluated the same bases
    result["bases"] = list({b["base_seed"]: b for p in parts for b in p["bases"]}.values())
    result["runs"] = [r for p in parts for r in p["runs"]]
    result["complete"] = all(p.get("complete") for p in parts)
    result["seconds"] = sum(p["seconds"] for p in parts)
    out.mkdir(parents=True, exist_ok=True)
    commands = [(Path(f) / "command.txt").read_text() for f in folders if (Path(f) / "command.txt").exists()]
    print(write_report(result, out, "".join(commands) + f"# merged with:\n{_command()}\n"))
    return 0


def _command() -> str:
    return "OMP_NUM_THREADS=1 .venv/bin/python " + " ".join(shlex.quote(a) for a in sys.argv)


def write_report(result: dict[str, Any], out: Path, command: str) -> str:
    """results.json, table.md (accuracy table + vision evidence), the two PNGs and command.txt; returns the table."""
    (out / "results.json").write_text(json.dumps(result, indent=1))
    report = table(result) + "\n" + evidence(result)
    (out / "table.md").write_text(report)
    plot_curves(result, out / "curves.png")
    plot_labels(result, out / "labels.png")
    (out / "command.txt").write_text(command)
    return report


def run_base(
    cfg: Any,
    base_seed: int,
    args: argparse.Namespace,
    t_start: float,
    bases_records: list[dict[str, Any]],
    runs: list[dict[str, Any]],
    save: Callable[[], Any],
) -> None:
    """Build (or load) the bases of one warm-start seed, describe them, and run every RL seed × method on them
    through the training recipe (corl_vl.recipe.train)."""
    from corl_vl.config import apply_overrides
    from corl_vl.eval.greedy import blank_images, evaluate_checkpoint
    from corl_vl.experiment import ensure_bases, heldout_set
    from corl_vl.recipe import train
    from corl_vl.science.warm_start import warm_start_record

    exp = cfg.experiment
    seeded = apply_overrides(
        copy.deepcopy(cfg),
        [f"experiment.warm_start.seed={base_seed}", f"experiment.warm_start.init_seed={base_seed}"],
    )
    max_new = exp.heldout.max_new_tokens
    bases = ensure_bases(seeded, log_every=100)
    heldout = heldout_set(seeded)
    blank = blank_images(heldout) if not exp.text_view else None
    agents = cfg.agent_names()
    before = {a: evaluate_checkpoint(str(b), heldout, max_new_tokens=max_new) for a, b in zip(agents, bases)}
    blanked = {
        a: evaluate_checkpoint(str(b), blank, max_new_tokens=max_new).as_dict()
        for a, b in zip(agents, bases)
        if blank is not None
    }
    kappa = _kappa_per_skill(before, agents, heldout, exp.skills)
    record = {
        "base_seed": base_seed,
        "warm_start": [warm_start_record(b) for b in bases],
        "heldout_n": len(heldout),
        "before": {a: r.as_dict() for a, r in before.items()},
        "blanked": blanked,
        "kappa": kappa,
    }
    summary = "  ".join(
        f"{a}: {before[a].per_skill} blanked {blanked.get(a, {}).get('per_skill')}" for a in agents
    )
    print(
        f"[{time.perf_counter() - t_start:6.0f}s] bases {base_seed}: {summary}  kappa {kappa['overall']['kappa']}"
    )
    bases_records.append(record)
    for seed in args.seeds:
        for method in args.methods:
            folder = Path(args.output_dir) / "runs" / f"bases{base_seed}-{method}-seed{seed}"
            shutil.rmtree(folder, ignore_errors=True)
            run_cfg = apply_overrides(
                copy.deepcopy(seeded),
                [f"reward.name={method}", f"train.seed={seed}", f"train.output_dir={folder}"],
            )
            probe = VisionProbe(blank, max_new)
            started = time.perf_counter()
            run = train(run_cfg, progress=False, callbacks=[probe])
            rec = {
                "evals": run.evals,
                "metrics": run.history,
                "seconds": time.perf_counter() - started,
                "weight_change": probe.change,
                "blanked_after": probe.blanked,
            }
            runs.append({"method": method, "seed": seed, "base_seed": base_seed, **rec})
            last = rec["evals"][-1]
            print(
                f"[{time.perf_counter() - t_start:6.0f}s] bases {base_seed} {method} seed {seed}: "
                + "  ".join(f"{a}: {last[a]['per_skill']}" for a in agents),
                flush=True,
            )
            del run
            save()


def _kappa_per_skill(
    before: dict[str, Any], agents: list[str], heldout: list[Any], skills: list[str]
) -> dict:
    """Cohen's κ (and the other pair statistics) between the two bases' held-out correctness, overall and per
    skill."""
    from corl_vl.science.diagnostics import pair_stats

    kappa: dict[str, Any] = {}
    for skill in [None, *skills]:
        ids = [p.id for p in heldout if skill is None or p.meta["skill"] == skill]
        stats = pair_stats(
            [before[agents[0]].correct[i] for i in ids], [before[agents[1]].correct[i] for i in ids]
        )
        kappa[skill or "overall"] = dataclasses.asdict(stats)
    return kappa


class VisionProbe(Callback):
    """Each agent's relative weight change per part over the run, and its held-out accuracy on blanked pictures
    after it (the evidence that the vision towers are used)."""

    def __init__(self, blank: list[Any] | None, max_new_tokens: int) -> None:
        self.blank, self.max_new_tokens = blank, max_new_tokens
        self.start: dict[str, Any] = {}
        self.change: dict[str, Any] = {}
        self.blanked: dict[str, Any] = {}

    def on_fit_start(self, run: Any) -> None:
        from corl_vl.science.vision_use import snapshot

        self.start = {agent.name: snapshot(agent.model) for agent in run.cohort.agents}

    def on_fit_end(self, run: Any) -> None:
        from corl_vl.experiment import evaluate_agents
        from corl_vl.science.vision_use import relative_change

        self.change = {a.name: relative_change(self.start[a.name], a.model) for a in run.cohort.agents}
        if self.blank is not None:
            results = evaluate_agents(run.cohort, self.blank, self.max_new_tokens)
            self.blanked = {k: v.as_dict() for k, v in results.items()}


if __name__ == "__main__":
    sys.exit(main())
