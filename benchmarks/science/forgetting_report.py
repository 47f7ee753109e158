"""Table and curves of the forgetting sweep (benchmarks/science/forgetting_sweep.py): per arm and agent, the change
of held-out accuracy on its strong skill, its weak skill and overall (mean ± sd over RL seeds), the policy entropy
at the first and last step, and the mean share of clipped tokens and KL over the steps.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any


def _ms(values: list[float], fmt: str = "+.3f") -> str:
    if not values:
        return "–"
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.mean(values):{fmt}} ± {sd:.3f}"


def _skills(run: dict[str, Any], i: int) -> tuple[list[str], list[str]]:
    """Agent i's strong skills and weak skills (every other agent's strong ones)."""
    sets = run["skill_sets"]
    return sets[i], [s for j, g in enumerate(sets) if j != i for s in g]


def accuracy(evaluation: dict[str, Any], agent: str, skills: list[str] | None) -> float:
    """Mean held-out accuracy of ``agent`` over ``skills`` (None: overall) in one evaluation."""
    if skills is None:
        return float(evaluation[agent]["overall"])
    return statistics.mean(evaluation[agent]["per_skill"][s] for s in skills)


def _metric(rows: list[dict[str, Any]], key: str) -> list[float]:
    return [float(r[key]) for r in rows if r.get(key) is not None]


def table(result: dict[str, Any]) -> str:
    """Markdown: one row per arm × agent."""
    runs = result["runs"]
    if not runs:
        return "no runs yet\n"
    steps = runs[0]["evals"][-1]["step"]
    seeds = sorted({r["seed"] for r in runs})
    lines = [
        f"Held-out greedy accuracy change over {steps} steps (before → after), mean ± sd over RL seeds {seeds}; "
        f"every run: corl_vl.demo_config() with {', '.join(result['common'])} and the arm's settings. "
        "Entropy: mean per-token entropy of the step's sampled completions (first → last step); clip: share of "
        "tokens whose ratio was clipped, mean over steps; KL: k3 to the frozen base, mean over steps.",
        "",
        "| arm | settings | agent | strong before | Δ strong | weak before | Δ weak | Δ overall | entropy first → last "
        "| clip share | KL | seeds |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for arm in dict.fromkeys(r["arm"] for r in runs):
        arm_runs = [r for r in runs if r["arm"] == arm]
        spec = result["arms"][arm]
        settings = ", ".join(spec["set"]) or "(demo defaults)"
        if spec.get("skill"):
            settings += f"; train on {spec['skill']} only"
        for i, agent in enumerate(arm_runs[0]["agents"]):
            cells: list[str] = []
            for skills in [*_skills(arm_runs[0], i), None]:
                before = [accuracy(r["evals"][0], agent, skills) for r in arm_runs]
                delta = [accuracy(r["evals"][-1], agent, skills) - b for r, b in zip(arm_runs, before)]
                if skills is not None:
                    cells.append(_ms(before, ".3f").split(" ±")[0])
                cells.append(_ms(delta))
            ent_first = [_metric(r["metrics"][agent], "entropy")[0] for r in arm_runs if r["metrics"][agent]]
            ent_last = [_metric(r["metrics"][agent], "entropy")[-1] for r in arm_runs if r["metrics"][agent]]
            clip = [statistics.mean(_metric(r["metrics"][agent], "clip/frac") or [0.0]) for r in arm_runs]
            kl = [statistics.mean(_metric(r["metrics"][agent], "kl") or [0.0]) for r in arm_runs]
            entropy = f"{statistics.mean(ent_first):.3f} → {_ms(ent_last, '.3f')}" if ent_first else "–"
            lines.append(
                f"| {arm} | {settings} | {agent} | {cells[0]} | {cells[1]} | {cells[2]} | {cells[3]} | {cells[4]} "
                f"| {entropy} | {_ms(clip, '.4f')} | {_ms(kl, '.4f')} | {len(arm_runs)} |"
            )
    return "\n".join(lines) + "\n"


def _mean_curve(runs: list[dict[str, Any]], values: Any) -> tuple[list[int], list[float]]:
    series = [values(r) for r in runs]
    n = min(len(s) for s in series)
    steps = [x for x, _ in series[0][:n]]
    return steps, [statistics.mean(s[j][1] for s in series) for j in range(n)]


def plot_curves(result: dict[str, Any], path: Path) -> None:
    """Rows: agents; columns: strong-skill accuracy, weak-skill accuracy, entropy, clip share; a line per arm."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = result["runs"]
    if not runs:
        return
    agents = runs[0]["agents"]
    cols = ["strong skill (held-out)", "weak skill (held-out)", "entropy", "clip share"]
    fig, axes = plt.subplots(
        len(agents), len(cols), figsize=(4.2 * len(cols), 3.4 * len(agents)), squeeze=False
    )
    colours = plt.get_cmap("tab20")
    for k, arm in enumerate(dict.fromkeys(r["arm"] for r in runs)):
        arm_runs = [r for r in runs if r["arm"] == arm]
        for i, agent in enumerate(agents):
            strong, weak = _skills(arm_runs[0], i)
            getters = [
                lambda r, s=strong, a=agent: [(e["step"], accuracy(e, a, s)) for e in r["evals"]],
                lambda r, s=weak, a=agent: [(e["step"], accuracy(e, a, s)) for e in r["evals"]],
                lambda r, a=agent: [(m["step"], m["entropy"]) for m in r["metrics"][a] if "entropy" in m],
                lambda r, a=agent: [(m["step"], m.get("clip/frac", 0.0)) for m in r["metrics"][a]],
            ]
            for j, get in enumerate(getters):
                steps, mean = _mean_curve(arm_runs, get)
                axes[i][j].plot(steps, mean, marker=".", color=colours(k % 20), label=arm)
    for i, agent in enumerate(agents):
        for j, title in enumerate(cols):
            axes[i][j].set_title(f"{agent}: {title}", fontsize=9)
            axes[i][j].set_xlabel("step")
            axes[i][j].grid(alpha=0.3)
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
