"""Theorem 1's separatrix in real training: Co-RL from pictures started from a grid of (pA, pB) on one skill.

Why: `corl-vl theory` integrates the two-agent majority-vote ODE and shows the separatrix pA + pB = 1 (above it
both agents climb to the right answer, below it both fall to the shared wrong one), but no training run was ever
checked against it. Here the toy's two tiny VLMs (configs/science/toy.yaml: qwen strong on figure_color, internvl
on ground_color, each 60 % systematically wrong on the other's skill, as in the demo) are also warm-started on a
third, *contested* skill that both are weak on: a share ``rate`` of each agent's labels follows the skill's
consistent wrong rule (the next palette colour), so both agents' mistakes are the same wrong answer, as the theorem
assumes. Each agent's rate is its own (``experiment.agents.<name>.weak_error_rates``), so the pairs of rates
give a grid of starting points (pA, pB) around the line. Co-RL then runs the toy's defaults for a fixed number of
steps, and p — each agent's *sampling* probability of the right answer (T = 1, ``--k-samples`` draws per held-out
picture) — is measured before and after (greedy accuracy beside it).

    nice -n 10 python benchmarks/science/separatrix.py --calibrate-only     # warm starts + measured p per rate
    nice -n 10 python benchmarks/science/separatrix.py --skip-done          # the grid (continues where it stopped)

Outputs (``--output-dir``): ``results.json`` (written after every warm start and run), ``table.md``,
``separatrix.png`` (see separatrix_report.py) and ``command.txt``. One training process at a time, by design.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.science.separatrix_report import plot, table  # noqa: E402
from corl_vl.paths import configure_cache_env  # noqa: E402
from corl_vl.train.loop import Callback  # noqa: E402

# chosen from the calibration (results_separatrix/table.md): rate 0.2 gave p ≈ 0.67 and 0.5 gave p ≈ 0.45, so
# these five put the grid's sums on both sides of pA + pB = 1 (0.2..0.8 would have left most of it below)
RATES = [0.05, 0.2, 0.35, 0.5, 0.65]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=str(ROOT / "configs/science/toy.yaml"))
    parser.add_argument("--contested", default="shape_color", help="the skill both agents are weak on")
    parser.add_argument("--rates-a", type=float, nargs="+", default=RATES, help="agent A's error rates")
    parser.add_argument("--rates-b", type=float, nargs="+", default=RATES, help="agent B's error rates")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1], help="RL seeds per point")
    parser.add_argument("--steps", type=int, default=10, help="train.max_steps (same for every point)")
    parser.add_argument("--per-skill", type=int, default=16, help="greedy held-out pictures per skill")
    parser.add_argument(
        "--pictures", type=int, default=32, help="held-out pictures of the contested skill for p"
    )
    parser.add_argument("--k-samples", type=int, default=8, help="T = 1 samples per picture for p")
    parser.add_argument("--calibrate-only", action="store_true", help="warm starts and their p only")
    parser.add_argument("--skip-done", action="store_true", help="keep the runs already in results.json")
    parser.add_argument("--output-dir", default=str(ROOT / "benchmarks/science/results_separatrix"))
    parser.add_argument(
        "--only-contested",
        action="store_true",
        help="control: RL problems of the contested skill only (the strong skills are not trained)",
    )
    parser.add_argument(
        "--points", nargs="+", metavar="A,B", help="only these (rate A, rate B), e.g. 0.65,0.65"
    )
    parser.add_argument(
        "--report-only", action="store_true", help="rewrite table and figure from results.json"
    )
    args = parser.parse_args(argv)
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "results.json"
    result = json.loads(path.read_text()) if (args.skip_done or args.report_only) and path.exists() else {}
    if args.report_only:
        return write(result, out, None)
    configure_cache_env()
    import torch

    torch.set_num_threads(1)
    result.update(
        {
            "contested": args.contested,
            "steps": args.steps,
            "pictures": args.pictures,
            "k_samples": args.k_samples,
            "per_skill": args.per_skill,
        }
    )
    result.setdefault("calibration", {})
    result.setdefault("runs", [])
    t0 = time.perf_counter()
    rates = list(dict.fromkeys([*args.rates_a, *args.rates_b]))
    for rate in sorted(rates, key=lambda r: abs(r - 0.5)) if args.calibrate_only else []:
        calibrate(args, rate, result)
        write(result, out, t0)
    if args.calibrate_only:
        return 0
    order = grid_order(args.rates_a, args.rates_b, args.seeds)
    result["only_contested"] = args.only_contested
    coarse = {r for a, b, _ in order[: len(args.seeds) * 9] for r in (a, b)}
    if args.points:
        coarse = set()  # the points' bases are calibrated when they are reached
    for rate in sorted(coarse, key=lambda r: abs(r - 0.5)):  # the coarse grid's bases, middle first
        calibrate(args, rate, result)
        write(result, out, t0)
    if args.points:
        wanted = {tuple(float(x) for x in pt.split(",")) for pt in args.points}
        order = [o for o in order if (o[0], o[1]) in wanted]
    for rate_a, rate_b, seed in order:
        if any((r["rate_a"], r["rate_b"], r["seed"]) == (rate_a, rate_b, seed) for r in result["runs"]):
            continue
        calibrate(args, rate_a, result)
        calibrate(args, rate_b, result)
        result["runs"].append(run_point(args, rate_a, rate_b, seed, result, out))
        write(result, out, t0)
    return 0


def grid_order(
    rates_a: list[float], rates_b: list[float], seeds: list[int]
) -> list[tuple[float, float, int]]:
    """Every (rate A, rate B, seed), the coarse grid first: a point's rank is the later of its two rates in
    the order given (default 0.2, 0.5, 0.8 before 0.35, 0.65), then seed, so a stopped run leaves a coarse
    grid over the whole square rather than one corner of the fine one."""
    first = [r for r in rates_a if r in (min(rates_a), max(rates_a))] + [
        r for r in rates_b if r in (min(rates_b), max(rates_b))
    ]
    rank = {r: 0 if r in first or r == 0.5 else 1 for r in [*rates_a, *rates_b]}
    points = [(a, b, s) for a in rates_a for b in rates_b for s in seeds]
    return sorted(points, key=lambda p: (max(rank[p[0]], rank[p[1]]), p[2]))


def write(result: dict[str, Any], out: Path, t0: float | None) -> int:
    """results.json, table.md, separatrix.png and command.txt from everything measured so far."""
    (out / "results.json").write_text(json.dumps(result, indent=1))
    if result.get("runs"):
        (out / "table.md").write_text(table(result))
        plot(result, out / "separatrix.png")
    if t0 is not None:
        cmd = "OMP_NUM_THREADS=1 nice -n 10 .venv/bin/python " + " ".join(shlex.quote(a) for a in sys.argv)
        # one line per process: earlier processes' lines stay, this one's is replaced as it progresses
        log = out / "command.txt"
        lines = log.read_text().splitlines() if log.exists() else []
        if lines and lines[-1].startswith(f"{cmd}  # ") and lines[-1].endswith(f"pid {os.getpid()}"):
            lines.pop()
        lines.append(
            f"{cmd}  # {len(result['runs'])} runs, {time.perf_counter() - t0:.0f} s, pid {os.getpid()}"
        )
        log.write_text("\n".join(lines) + "\n")
    return 0


def grid_config(args: argparse.Namespace, rate_a: float, rate_b: float, extra: list[str] = ()) -> Any:
    """The toy's config with the contested skill added and each agent's own error rate on it."""
    from corl_vl.config import load_config

    overrides = [
        f"experiment.warm_start.contested_skills=[{args.contested}]",
        f"experiment.heldout.per_skill={args.per_skill}",
        "experiment.heldout.every=0",
        f"train.max_steps={args.steps}",
        "train.plot=false",
        "train.save_every=0",
        "train.report_to=[none]",
        *extra,
    ]
    cfg = load_config(args.config, overrides)
    names = cfg.agent_names()
    cfg.experiment.agents = {
        names[0]: {"weak_error_rates": {args.contested: rate_a}},
        names[1]: {"weak_error_rates": {args.contested: rate_b}},
    }
    return cfg


def contested_pictures(args: argparse.Namespace) -> list[Any]:
    """Held-out test-split pictures of the contested skill (the seed differs from the greedy set's)."""
    from corl_vl.eval.greedy import heldout_problems

    return heldout_problems(args.pictures, [args.contested], seed=7)


def sampling_p(adapter: Any, model: Any, problems: list[Any], k: int, max_new: int) -> dict[str, float]:
    """Share of T = 1 samples that give the right answer (p) and the skill's shared wrong answer, over pictures."""
    from corl_vl.answers import extract_answer
    from corl_vl.answers.equivalence import equivalent
    from corl_vl.data.synth import get_skill
    from corl_vl.eval.greedy import greedy_engine

    was_training = model.training
    rollouts = greedy_engine(adapter, model).generate(
        problems, k=k, temperature=1.0, max_new_tokens=max_new, seed=12345
    )
    model.train(was_training)
    right = wrong = total = 0
    for problem, rollout in zip(problems, rollouts, strict=True):
        mistake = get_skill(problem.meta["skill"]).mistake(problem.meta["params"])
        for c in rollout.completions:
            answer = extract_answer(c.text, problem.choices)
            right += answer is not None and equivalent(problem.answer, answer, problem.choices)
            wrong += answer is not None and equivalent(mistake, answer, problem.choices)
            total += 1
    return {"p": right / total, "p_mistake": wrong / total}


def calibrate(args: argparse.Namespace, rate: float, result: dict[str, Any]) -> None:
    """Warm-start both agents at ``rate`` on the contested skill (cached) and measure p and greedy accuracy."""
    from corl_vl.eval.greedy import heldout_accuracy
    from corl_vl.experiment import ensure_bases, heldout_set
    from model_adapters.registry import create_adapter

    cfg = grid_config(args, rate, rate)
    agents = cfg.agent_names()
    result["agents"] = agents
    if all(str(rate) in result["calibration"].get(a, {}) for a in agents):
        return
    started = time.perf_counter()
    bases = ensure_bases(cfg, log_every=0)
    pictures, heldout = contested_pictures(args), heldout_set(cfg)
    for agent, base in zip(agents, bases):
        adapter = create_adapter(str(base))
        model = adapter.load_model()
        greedy = heldout_accuracy(
            adapter, model, heldout, max_new_tokens=cfg.experiment.heldout.max_new_tokens
        )
        sampled = sampling_p(adapter, model, pictures, args.k_samples, cfg.grpo.max_new_tokens)
        result["calibration"].setdefault(agent, {})[str(rate)] = {
            **sampled,
            "greedy": greedy.per_skill,
            "base": base.name,
        }
        print(f"[calibrate] {agent} rate {rate}: p {sampled['p']:.3f} greedy {greedy.per_skill}", flush=True)
    print(f"[calibrate] rate {rate}: {time.perf_counter() - started:.0f} s", flush=True)


def only_contested(args: argparse.Namespace) -> Any:
    """A ``prepare`` hook restricting the cohort's training problems to the contested skill (the control)."""
    from corl_vl.train.cohort import Sampler

    def restrict(cohort: Any) -> None:
        ids = [pid for pid, p in cohort.base.items() if p.meta["skill"] == args.contested]
        cohort.sampler = Sampler(ids, seed=cohort.cfg.train.seed, shuffle=cohort.cfg.data.shuffle)

    return restrict


class SamplingProbe(Callback):
    """Each agent's sampling p on the contested pictures after the last step (before: the calibration's)."""

    def __init__(self, pictures: list[Any], k: int, max_new: int) -> None:
        self.pictures, self.k, self.max_new = pictures, k, max_new
        self.after: dict[str, dict[str, float]] = {}

    def on_fit_end(self, run: Any) -> None:
        for agent in run.cohort.agents:
            with agent.backend.inference_weights():
                self.after[agent.name] = sampling_p(
                    agent.adapter, agent.model, self.pictures, self.k, self.max_new
                )


def run_point(
    args: argparse.Namespace, rate_a: float, rate_b: float, seed: int, result: dict[str, Any], out: Path
) -> dict[str, Any]:
    """One Co-RL run from the bases at (rate_a, rate_b) with RL seed ``seed``: p and greedy before/after."""
    from corl_vl.recipe import train

    folder = out / "runs" / f"a{rate_a}-b{rate_b}-seed{seed}"
    shutil.rmtree(folder, ignore_errors=True)
    extra = ["reward.name=co_rl", f"train.seed={seed}", f"train.output_dir={folder}"]
    cfg = grid_config(args, rate_a, rate_b, extra)
    agents = cfg.agent_names()
    probe = SamplingProbe(contested_pictures(args), args.k_samples, cfg.grpo.max_new_tokens)
    started = time.perf_counter()
    restrict = only_contested(args) if args.only_contested else None
    run = train(cfg, progress=False, callbacks=[probe], prepare=restrict)
    first, last = run.evals[0], run.evals[-1]
    cal = result["calibration"]
    rec = {
        "rate_a": rate_a,
        "rate_b": rate_b,
        "seed": seed,
        "p_before": [cal[agents[0]][str(rate_a)]["p"], cal[agents[1]][str(rate_b)]["p"]],
        "p_after": [probe.after[a]["p"] for a in agents],
        "p_mistake_after": [probe.after[a]["p_mistake"] for a in agents],
        "greedy_before": [first[a]["per_skill"][args.contested] for a in agents],
        "greedy_after": [last[a]["per_skill"][args.contested] for a in agents],
        "evals": [{a: e[a]["per_skill"] for a in agents} for e in (first, last)],
        "seconds": time.perf_counter() - started,
    }
    shutil.rmtree(
        folder, ignore_errors=True
    )  # checkpoints are not kept: 2 × 25 × 2 folders would fill the disk
    print(
        f"[run] a {rate_a} b {rate_b} seed {seed}: p {rec['p_before']} → "
        f"{[round(x, 3) for x in rec['p_after']]}  ({rec['seconds']:.0f} s)",
        flush=True,
    )
    return rec


if __name__ == "__main__":
    sys.exit(main())
