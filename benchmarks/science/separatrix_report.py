"""Report of the separatrix grid (benchmarks/science/separatrix.py): direction classification, table, figure.

Direction, defined once here: Theorem 1 says that above the separatrix (pA + pB > 1) both agents end at the right
answer and below it (pA + pB < 1) both end at the shared wrong one, so over a run the sum pA + pB must move
towards 2 above the line and towards 0 below it. A run *matches* when ``sign(Δ(pA + pB)) == sign(pA + pB − 1)``
at its start (a change of exactly 0 never matches). The stricter per-agent reading — both agents move in the
theorem's direction — is reported beside it. Points with |pA + pB − 1| < ``NEAR`` are "near" the line.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

NEAR = 0.1


def _sign(x: float) -> int:
    return (x > 0) - (x < 0)


def classify(start: Sequence[float], end: Sequence[float], near: float = NEAR) -> dict[str, Any]:
    """Theorem 1's direction for a start (pA, pB) and whether the run start → end followed it.

    Returns ``region`` ("near"/"away"), ``predicted`` (+1 above the line, −1 below, 0 on it), ``delta_sum``,
    ``match`` (the sum moved in the predicted direction) and ``both`` (each agent moved in it).
    """
    if len(start) != 2 or len(end) != 2:
        raise ValueError("classify: start and end are (pA, pB) pairs")
    margin = start[0] + start[1] - 1.0
    predicted = _sign(margin)
    delta = (end[0] + end[1]) - (start[0] + start[1])
    each = [_sign(e - s) for s, e in zip(start, end)]
    return {
        "region": "near" if abs(margin) < near else "away",
        "margin": margin,
        "predicted": predicted,
        "delta_sum": delta,
        "match": predicted != 0 and _sign(delta) == predicted,
        "both": predicted != 0 and all(d == predicted for d in each),
    }


def simulator_drift(start: Sequence[float], k: int = 8) -> float:
    """d(pA + pB)/dt of the simulator (corl_vl.science.theory, two-agent Co-RL, K draws) at ``start``."""
    from corl_vl.science.theory import flow, ring_supervisors

    return float(sum(flow(list(start), ring_supervisors(2), k)))


def shares(rows: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per region: number of rows, share whose sum matched, share where both agents matched."""
    out: dict[str, dict[str, Any]] = {}
    for region in ("away", "near"):
        sub = [r for r in rows if r["region"] == region]
        n = len(sub)
        out[region] = {
            "n": n,
            "match": sum(r["match"] for r in sub) / n if n else math.nan,
            "both": sum(r["both"] for r in sub) / n if n else math.nan,
        }
    return out


def point_rows(result: dict[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(one row per run, one row per grid point with the seeds' mean end) from results.json, sampling p."""
    runs, points = [], []
    by_point: dict[tuple[float, float], list[dict[str, Any]]] = {}
    for run in result["runs"]:
        by_point.setdefault((run["rate_a"], run["rate_b"]), []).append(run)
        runs.append({**run, **classify(run["p_before"], run["p_after"])})
    for (ra, rb), rs in sorted(by_point.items()):
        start = rs[0]["p_before"]
        end = [sum(r["p_after"][i] for r in rs) / len(rs) for i in (0, 1)]
        points.append({"rate_a": ra, "rate_b": rb, "p_before": start, "p_after": end, "seeds": len(rs)})
        points[-1].update(classify(start, end))
    return runs, points


def table(result: dict[str, Any]) -> str:
    """Markdown: the calibration, the match shares, then every run."""
    agents = result["agents"]
    skill = result["contested"]
    lines = [f"# Separatrix grid on `{skill}` ({agents[0]} = A, {agents[1]} = B)", ""]
    lines += [
        f"Calibration (warm-start error rate on `{skill}` → sampling p at T = 1, "
        f"{result['k_samples']} samples × {result['pictures']} pictures; greedy accuracy per skill):",
        "",
        "| agent | error rate | sampling p | shared wrong answer | greedy per skill |",
        "|---|---|---|---|---|",
    ]
    for agent in agents:
        for rate, cal in sorted(result["calibration"].get(agent, {}).items(), key=lambda kv: float(kv[0])):
            greedy = ", ".join(f"{k} {v:.2f}" for k, v in cal["greedy"].items())
            lines.append(f"| {agent} | {rate} | {cal['p']:.3f} | {cal['p_mistake']:.3f} | {greedy} |")
    runs, points = point_rows(result)
    lines += [
        "",
        "Direction matches Theorem 1 (sign of Δ(pA + pB) = sign of pA + pB − 1 at the start; "
        "'both': each agent moved that way):",
        "",
        "| unit | region | n | sum matches | both agents match |",
        "|---|---|---|---|---|",
    ]
    for unit, rows in (("run", runs), ("point (mean of seeds)", points)):
        for region, s in shares(rows).items():
            lines.append(
                f"| {unit} | {region} (distance to the line {'≥' if region == 'away' else '<'} {NEAR}) | "
                f"{s['n']} | {s['match']:.2f} | {s['both']:.2f} |"
            )
    lines += [
        "",
        "Every run (sampling p before → after; greedy accuracy on the contested skill before → after):",
        "",
        "| rate A | rate B | seed | pA | pB | pA+pB−1 | simulator dΣ/dt | Δ(pA+pB) | match | greedy A | greedy B |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        ga, gb = (f"{r['greedy_before'][i]:.2f} → {r['greedy_after'][i]:.2f}" for i in (0, 1))
        lines.append(
            f"| {r['rate_a']} | {r['rate_b']} | {r['seed']} | {r['p_before'][0]:.2f} → {r['p_after'][0]:.2f} | "
            f"{r['p_before'][1]:.2f} → {r['p_after'][1]:.2f} | {r['margin']:+.2f} | {simulator_drift(r['p_before']):+.3f} | {r['delta_sum']:+.3f} | "
            f"{'yes' if r['match'] else 'no'} | {ga} | {gb} |"
        )
    return "\n".join(lines) + "\n"


def plot(result: dict[str, Any], path: Path, k: int = 8) -> None:
    """Each run's start → end arrow in the (pA, pB) plane over the simulator's flow and the line pA + pB = 1."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    from corl_vl.science.theory import phi, q

    grid = np.linspace(0.0, 1.0, 41)
    pa, pb = np.meshgrid(grid, grid)
    ua = np.asarray(q(pa, k)) * np.asarray(phi(pb, k))
    ub = np.asarray(q(pb, k)) * np.asarray(phi(pa, k))
    runs, _ = point_rows(result)
    fig, ax = plt.subplots(figsize=(7, 7))
    try:
        ax.streamplot(pa, pb, ua, ub, color="0.75", density=1.0, linewidth=0.6)
        ax.plot([0, 1], [1, 0], "r--", lw=1.5, label="separatrix $p_A + p_B = 1$")
        for r in runs:
            (x0, y0), (x1, y1) = r["p_before"], r["p_after"]
            colour = "tab:green" if r["match"] else "tab:red"
            ax.annotate("", (x1, y1), (x0, y0), arrowprops={"arrowstyle": "->", "color": colour, "lw": 1.2})
            ax.plot(x0, y0, "o", color="k", ms=3)
        ax.plot([], [], color="tab:green", label="run follows Theorem 1 (sign of Δ(pA+pB))")
        ax.plot([], [], color="tab:red", label="run does not")
        agents = result["agents"]
        ax.set(
            xlim=(0, 1),
            ylim=(0, 1),
            aspect="equal",
            xlabel=f"$p_A$ ({agents[0]}, sampling p on {result['contested']})",
            ylabel=f"$p_B$ ({agents[1]})",
        )
        ax.set_title(
            f"Co-RL from pictures, {result['steps']} steps: start → end (grey: simulator flow, K = {k})"
        )
        ax.legend(loc="lower left", fontsize=8, framealpha=0.9)
        fig.savefig(path, dpi=120, bbox_inches="tight")
    finally:
        plt.close(fig)
