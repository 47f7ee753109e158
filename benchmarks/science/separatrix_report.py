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


def two_outcome(p: float, p_mistake: float) -> float:
    """The theorem's p when only the right answer and the shared wrong one count: p / (p + p_mistake).

    Why: the theorem's agents have two answers, ours six; a sample that is neither right nor the shared
    mistake rarely wins a vote, so a vote is a contest between p and p_mistake, not between p and 1 − p."""
    return p / (p + p_mistake) if p + p_mistake > 0 else 0.5


def coordinates(result: dict[str, Any], run: dict[str, Any], view: str) -> tuple[list[float], list[float]]:
    """(start, end) of a run: sampling p (``view="p"``) or its two-outcome projection (``"two"``)."""
    if view == "p":
        return list(run["p_before"]), list(run["p_after"])
    rates = (str(run["rate_a"]), str(run["rate_b"]))
    cal = [result["calibration"][a][r] for a, r in zip(result["agents"], rates)]
    start = [two_outcome(c["p"], c["p_mistake"]) for c in cal]
    end = [two_outcome(x, m) for x, m in zip(run["p_after"], run["p_mistake_after"])]
    return start, end


def point_rows(result: dict[str, Any], view: str = "p") -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(one row per run, one row per grid point with the seeds' mean end) from results.json, in ``view``."""
    runs, points = [], []
    by_point: dict[tuple[float, float], list[tuple[list[float], list[float]]]] = {}
    for run in result["runs"]:
        start, end = coordinates(result, run, view)
        by_point.setdefault((run["rate_a"], run["rate_b"]), []).append((start, end))
        runs.append({**run, "start": start, "end": end, **classify(start, end)})
    for (ra, rb), pairs in sorted(by_point.items()):
        start = pairs[0][0]
        end = [sum(e[i] for _, e in pairs) / len(pairs) for i in (0, 1)]
        points.append({"rate_a": ra, "rate_b": rb, "start": start, "end": end, "seeds": len(pairs)})
        points[-1].update(classify(start, end))
    return runs, points


VIEWS = {"p": "sampling p", "two": "two-outcome p / (p + p_mistake)"}


def _calibration(result: dict[str, Any]) -> list[str]:
    skill = result["contested"]
    lines = [
        f"Calibration (warm-start error rate on `{skill}` → sampling p at T = 1 and the share of samples giving the "
        f"shared wrong answer, {result['k_samples']} samples × {result['pictures']} pictures; greedy accuracy per "
        f"skill on {result['per_skill']} pictures each):",
        "",
        "| agent | error rate | sampling p | shared wrong answer | greedy per skill |",
        "|---|---|---|---|---|",
    ]
    for agent in result["agents"]:
        for rate, cal in sorted(result["calibration"].get(agent, {}).items(), key=lambda kv: float(kv[0])):
            greedy = ", ".join(f"{k} {v:.2f}" for k, v in cal["greedy"].items())
            lines.append(f"| {agent} | {rate} | {cal['p']:.3f} | {cal['p_mistake']:.3f} | {greedy} |")
    return lines


def table(result: dict[str, Any]) -> str:
    """Markdown: the calibration, the match shares in both views, then every run."""
    agents = result["agents"]
    lines = [f"# Separatrix grid on `{result['contested']}` ({agents[0]} = A, {agents[1]} = B)", ""]
    lines += [*_calibration(result), ""]
    lines += [
        "Direction matches Theorem 1 (sign of Δ(pA + pB) = sign of pA + pB − 1 at the start; "
        "'both': each agent moved that way):",
        "",
        "| coordinates | unit | region | n | sum matches | both agents match |",
        "|---|---|---|---|---|---|",
    ]
    for view, name in VIEWS.items():
        runs, points = point_rows(result, view)
        for unit, rows in (("run", runs), ("point (mean of seeds)", points)):
            for region, s in shares(rows).items():
                lines.append(
                    f"| {name} | {unit} | {region} (distance to the line {'≥' if region == 'away' else '<'} "
                    f"{NEAR}) | {s['n']} | {s['match']:.2f} | {s['both']:.2f} |"
                )
    lines += [
        "",
        "Every run (sampling p before → after, its distance to the line, the simulator's d(pA+pB)/dt there, the "
        "change of the sum; the two-outcome view's start margin and change; greedy accuracy on the contested skill):",
        "",
        "| rate A | rate B | seed | pA | pB | pA+pB−1 | simulator dΣ/dt | Δ(pA+pB) | match "
        "| two-outcome margin → Δ | match | greedy A | greedy B |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    two, _ = point_rows(result, "two")
    for r, t in zip(point_rows(result)[0], two):
        ga, gb = (f"{r['greedy_before'][i]:.2f} → {r['greedy_after'][i]:.2f}" for i in (0, 1))
        lines.append(
            f"| {r['rate_a']} | {r['rate_b']} | {r['seed']} | {r['start'][0]:.2f} → {r['end'][0]:.2f} | "
            f"{r['start'][1]:.2f} → {r['end'][1]:.2f} | {r['margin']:+.2f} | {simulator_drift(r['start']):+.3f} | "
            f"{r['delta_sum']:+.3f} | {'yes' if r['match'] else 'no'} | {t['margin']:+.2f} → {t['delta_sum']:+.3f} "
            f"| {'yes' if t['match'] else 'no'} | {ga} | {gb} |"
        )
    return "\n".join(lines) + "\n"


def plot(result: dict[str, Any], path: Path, k: int = 8) -> None:
    """Each run's start → end arrow in the (pA, pB) plane over the simulator's flow and the line pA + pB = 1,
    in both coordinates (sampling p; the two-outcome projection) side by side."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    from corl_vl.science.theory import phi, q

    grid = np.linspace(0.0, 1.0, 41)
    pa, pb = np.meshgrid(grid, grid)
    ua = np.asarray(q(pa, k)) * np.asarray(phi(pb, k))
    ub = np.asarray(q(pb, k)) * np.asarray(phi(pa, k))
    agents = result["agents"]
    fig, axes = plt.subplots(1, 2, figsize=(13, 6.5))
    try:
        for ax, (view, name) in zip(axes, VIEWS.items()):
            ax.streamplot(pa, pb, ua, ub, color="0.75", density=1.0, linewidth=0.6)
            ax.plot([0, 1], [1, 0], "r--", lw=1.5, label="separatrix $p_A + p_B = 1$")
            for r in point_rows(result, view)[0]:
                (x0, y0), (x1, y1) = r["start"], r["end"]
                colour = "tab:green" if r["match"] else "tab:red"
                ax.annotate(
                    "", (x1, y1), (x0, y0), arrowprops={"arrowstyle": "->", "color": colour, "lw": 1.2}
                )
                ax.plot(x0, y0, "o", color="k", ms=3)
            ax.plot([], [], color="tab:green", label="run follows Theorem 1 (sign of Δ(pA+pB))")
            ax.plot([], [], color="tab:red", label="run does not")
            ax.set(xlim=(0, 1), ylim=(0, 1), aspect="equal", xlabel=f"$p_A$ ({agents[0]})")
            ax.set(ylabel=f"$p_B$ ({agents[1]})", title=f"{name} on {result['contested']}")
            ax.legend(loc="lower left", fontsize=8, framealpha=0.9)
        fig.suptitle(
            f"Co-RL from pictures, {result['steps']} steps, each run start → end; grey: simulator flow (K = {k})"
        )
        fig.savefig(path, dpi=110, bbox_inches="tight")
    finally:
        plt.close(fig)
