"""When does reliability weighting help a 3-agent all-peers cohort? The two-outcome theory, scanned.

Why: the 3-agent toy (three_agents.py) tests one cohort; the theory (corl_vl/science/cohort_theory.py, checked
against simulation of the trainer's reward code in tests/test_soft_theory.py) says in which regimes weighting
changes the end state at all. Each scenario is a start (rows: prompt types, columns: agents); the table gives
the agents' mean accuracy over prompt types at t = 200 (learning-rate units; K = 8, hard labels, GRPO) under
uniform votes, agreement weights and Dawid–Skene weights, per agent and per prompt type (``--per-tag``).

    OMP_NUM_THREADS=1 python benchmarks/science/weighting_regimes.py
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

SCENARIOS = {
    # two complementary agents (0.9 strong / 0.2 weak) and a third that is always wrong with accuracy c
    **{f"third agent poor, c = {c:g}": ((0.9, 0.2, c), (0.2, 0.9, c)) for c in (0.0, 0.05, 0.1, 0.15, 0.3)},
    # the third is a specialist: right on type 1, wrong on type 2 (mean 0.5: per-agent weight ≈ 0)
    "third a specialist (0.95 / 0.05)": ((0.9, 0.2, 0.95), (0.2, 0.9, 0.05)),
    # an agent good on average but wrong on type 2, where a weaker-on-average agent is right
    "trusted agent wrong on one type": ((0.6, 0.99, 0.3), (0.45, 0.35, 0.8)),
    # three agents each strong on one of three types (the paper's ring example): weights are all equal
    "symmetric ring3": ((0.9, 0.4, 0.4), (0.4, 0.9, 0.4), (0.4, 0.4, 0.9)),
}


def main() -> int:
    import numpy as np

    from corl_vl.science.cohort_theory import WEIGHTINGS, all_peers, simulate

    out = ROOT / "benchmarks/science/results_three_agents/weighting_regimes.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    cols = [(w, False) for w in WEIGHTINGS] + [(w, True) for w in WEIGHTINGS[1:]]
    lines = [
        "Two-outcome theory, 3 agents, all peers, K = 8, hard labels, GRPO: mean accuracy over prompt types of "
        "each agent at t = 200 (start → end). Rows of the start = prompt types.",
        "",
        "| scenario (start per type) | "
        + " | ".join(f"{w}{' per type' if t else ''}" for w, t in cols)
        + " |",
        "|---|" + "---|" * len(cols),
    ]
    for name, start in SCENARIOS.items():
        cells = []
        for weighting, per_type in cols:
            final = simulate(start, all_peers(3), 8, weighting=weighting, per_type=per_type).final
            cells.append(", ".join(f"{x:.2f}" for x in final.mean(axis=0)))
        first = ", ".join(f"{x:.2f}" for x in np.asarray(start).mean(axis=0))
        rows = " / ".join(",".join(f"{x:g}" for x in r) for r in start)
        lines.append(f"| {name} ({rows}; mean {first}) | " + " | ".join(cells) + " |")
        print(lines[-1], flush=True)
    out.write_text("\n".join(lines) + "\n")
    print(f"written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
