"""Pure helpers of the cohort experiments (diversity.py, three_agents.py): gains from held-out evals, the share
of GT's gain a weighting keeps, and Spearman's rank correlation. No torch, no models: tested with hand numbers
in tests/test_cohort_stats.py.

An eval record is what the recipe's held-out callback stores per evaluation: ``{"step": s, agent: {"overall":
x, "per_skill": {skill: x}}}``; a run holds the list of them (``run["evals"]``), first = before training.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Any


def gain(evals: Sequence[Mapping[str, Any]], agent: str, skills: Sequence[str] | None = None) -> float:
    """Held-out accuracy change of ``agent`` from the first eval to the last: on the mean of ``skills`` (each
    skill weighted equally), or on the overall accuracy when ``skills`` is None."""

    def value(e: Mapping[str, Any]) -> float:
        if skills is None:
            return float(e[agent]["overall"])
        return statistics.mean(float(e[agent]["per_skill"][s]) for s in skills)

    return value(evals[-1]) - value(evals[0])


def ranks(values: Sequence[float]) -> list[float]:
    """1-based ranks, ties sharing the mean of the ranks they span (the convention Spearman's ρ needs)."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    out = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            out[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return out


def spearman(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    """Spearman's ρ: Pearson's correlation of the ranks (ties averaged). None when it is undefined: fewer than
    two pairs, or either variable constant."""
    if len(xs) != len(ys):
        raise ValueError(f"spearman: {len(xs)} x values but {len(ys)} y values")
    if len(xs) < 2:
        return None
    rx, ry = ranks(xs), ranks(ys)
    mx, my = statistics.mean(rx), statistics.mean(ry)
    sxy = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    sxx = sum((a - mx) ** 2 for a in rx)
    syy = sum((b - my) ** 2 for b in ry)
    if sxx == 0 or syy == 0:
        return None
    return sxy / math.sqrt(sxx * syy)


def kept_share(arm_gains: Sequence[float], gt_gains: Sequence[float]) -> float | None:
    """Mean gain of an arm over the mean gain of GT reward on the same runs' seeds; None when GT gained
    nothing (≤ 0): a share of no gain is not defined."""
    gt = statistics.mean(gt_gains)
    if gt <= 0:
        return None
    return statistics.mean(arm_gains) / gt


def weak_skills(warm_start: Mapping[str, Any]) -> list[str]:
    """An agent's weak skills from its warm-start record (``warm_start_record``): the spec's ``weak_skills``."""
    return list(warm_start["spec"].get("weak_skills") or [])
