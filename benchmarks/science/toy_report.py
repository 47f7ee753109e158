"""Tables and plots of the toy reproduction (benchmarks/science/toy_reproduction.py): held-out accuracy before →
after per method, agent and skill (mean ± sd over every warm-start seed × RL seed), the evidence that the
pictures are used (vision-tower weight change, blanked-image accuracy, κ between the bases), and the curves.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

METHODS = {"co_rl": "Co-RL (peer)", "ttrl": "TTRL (self)", "gt": "GT reward"}


def _ms(values: list[float]) -> str:
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.mean(values):.3f} ± {sd:.3f}"


def table(result: dict[str, Any]) -> str:
    """Markdown: per method, agent and skill (and overall): before → after, mean ± sd over all runs."""
    agents, sets = result["agents"], result["skill_sets"]
    skills = [s for g in sets for s in g]
    seeds = sorted({r["seed"] for r in result["runs"]})
    bases = sorted({r.get("base_seed", 0) for r in result["runs"]})
    view = "text rendering (ablation)" if result.get("text_view") else "pictures"
    lines = [
        f"Held-out greedy accuracy ({result['heldout_n']} test problems, {view}), mean ± sd over "
        f"{len(bases)} warm-start seeds {bases} × {len(seeds)} RL seeds {seeds}. Strong skills marked *.",
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


def evidence(result: dict[str, Any]) -> str:
    """Markdown: is vision used? Weight change per part, accuracy with blanked pictures, κ between the bases."""
    agents, sets = result["agents"], result["skill_sets"]
    skills = [s for g in sets for s in g]
    lines = ["Relative weight change ‖Δθ‖/‖θ‖ during RL, per part (mean ± sd over runs):", ""]
    parts = sorted({p for r in result["runs"] for a in agents for p in r.get("weight_change", {}).get(a, {})})
    if parts:
        lines += ["| method | agent | " + " | ".join(parts) + " |", "|---|---|" + "---|" * len(parts)]
        for method in dict.fromkeys(r["method"] for r in result["runs"]):
            runs = [r for r in result["runs"] if r["method"] == method]
            for agent in agents:
                cells = []
                for part in parts:
                    vals = [
                        r["weight_change"][agent][part] for r in runs if part in r["weight_change"][agent]
                    ]
                    sd = statistics.stdev(vals) if len(vals) > 1 else 0.0
                    cells.append(f"{statistics.mean(vals):.2e} ± {sd:.1e}" if vals else "–")
                lines.append(f"| {METHODS.get(method, method)} | {agent} | " + " | ".join(cells) + " |")
    if not result.get("text_view"):  # the text ablation has no pictures to blank
        lines += _blanked(result, skills)
    lines += [
        "",
        "Error correlation between the two bases (Cohen's κ on held-out correctness; `corl-vl diagnose`):",
        "",
    ]
    lines += [
        "| warm-start seed | κ overall | " + " | ".join(f"κ {s}" for s in skills) + " | complementarity |",
        "|---|---|" + "---|" * (len(skills) + 1),
    ]
    for b in result["bases"]:
        k = b["kappa"]

        def fmt(x: dict[str, Any] | None) -> str:
            return "n/a" if x is None or x["kappa"] is None else f"{x['kappa']:+.3f}"

        cells = [fmt(k.get(s)) for s in skills]
        lines.append(
            f"| {b['base_seed']} | {fmt(k['overall'])} | "
            + " | ".join(cells)
            + f" | {k['overall']['complementarity']:.1f} |"
        )
    return "\n".join(lines) + "\n"


def _blanked(result: dict[str, Any], skills: list[str]) -> list[str]:
    agents = result["agents"]
    lines = [
        "",
        "Held-out accuracy with every picture blanked (white), per skill (mean over runs); chance is 1/classes:",
        "",
        "| model | agent | " + " | ".join(f"{s} real → blanked" for s in skills) + " |",
        "|---|---|" + "---|" * len(skills),
    ]
    rows: list[tuple[str, str, list[dict[str, Any]], list[dict[str, Any]]]] = []
    for agent in agents:
        rows.append(
            (
                "base",
                agent,
                [b["before"][agent] for b in result["bases"]],
                [b["blanked"][agent] for b in result["bases"]],
            )
        )
    for method in dict.fromkeys(r["method"] for r in result["runs"]):
        runs = [r for r in result["runs"] if r["method"] == method]
        for agent in agents:
            rows.append(
                (
                    f"after {METHODS.get(method, method)}",
                    agent,
                    [r["evals"][-1][agent] for r in runs],
                    [r["blanked_after"][agent] for r in runs],
                )
            )
    for label, agent, real, blank in rows:
        cells = [
            f"{statistics.mean(x['per_skill'][s] for x in real):.3f} → "
            f"{statistics.mean(x['per_skill'][s] for x in blank):.3f}"
            for s in skills
        ]
        lines.append(f"| {label} | {agent} | " + " | ".join(cells) + " |")
    return lines
