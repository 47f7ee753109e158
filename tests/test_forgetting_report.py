"""The forgetting sweep's table (benchmarks/science/forgetting_report.py): strong / weak / overall change per
agent as mean ± sd over seeds, entropy first → last, clip share and KL, on hand-written numbers."""

from __future__ import annotations

import sys
from pathlib import Path

# the benchmarks folder is not an installed package: import it from the checkout
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.science.forgetting_report import accuracy, plot_curves, table


def _eval(step: int, qwen: tuple[float, float], internvl: tuple[float, float]) -> dict:
    def agent(fig: float, ground: float) -> dict:
        return {"overall": (fig + ground) / 2, "per_skill": {"figure_color": fig, "ground_color": ground}}

    return {"step": step, "qwen": agent(*qwen), "internvl": agent(*internvl)}


def _run(seed: int, qwen_after: tuple[float, float], entropy_last: float) -> dict:
    metrics = [
        {"step": 0, "entropy": 0.2, "clip/frac": 0.0, "kl": 0.0},
        {"step": 1, "entropy": entropy_last, "clip/frac": 0.1, "kl": 0.02},
    ]
    return {
        "arm": "kl_0.1",
        "seed": seed,
        "agents": ["qwen", "internvl"],
        "skill_sets": [["figure_color"], ["ground_color"]],
        "evals": [_eval(0, (1.0, 0.25), (0.25, 1.0)), _eval(2, qwen_after, (0.25, 1.0))],
        "metrics": {"qwen": metrics, "internvl": metrics},
    }


RESULT = {
    "common": ["train.max_steps=2"],
    "arms": {"kl_0.1": {"set": ["grpo.beta=0.1"]}},
    "runs": [_run(0, (0.75, 0.5), 0.1), _run(1, (0.5, 0.75), 0.3)],
}


def test_accuracy_reads_skills_and_overall():
    e = _eval(0, (1.0, 0.25), (0.25, 1.0))
    assert accuracy(e, "qwen", ["figure_color"]) == 1.0
    assert accuracy(e, "qwen", ["figure_color", "ground_color"]) == 0.625
    assert accuracy(e, "qwen", None) == 0.625


def test_table_row_per_arm_and_agent():
    rows = [line for line in table(RESULT).splitlines() if line.startswith("| kl_0.1")]
    assert len(rows) == 2
    qwen = [c.strip() for c in rows[0].split("|")[1:-1]]
    # strong (figure_color): 1.0 → 0.75 / 0.5: Δ −0.25, −0.5 → mean −0.375, sd √(2·0.125²) = 0.177
    # weak (ground_color): 0.25 → 0.5 / 0.75: Δ +0.25, +0.5 → +0.375 ± 0.177; overall Δ 0 in both seeds
    assert qwen[:8] == [
        "kl_0.1",
        "grpo.beta=0.1",
        "qwen",
        "1.000",
        "-0.375 ± 0.177",
        "0.250",
        "+0.375 ± 0.177",
        "+0.000 ± 0.000",
    ]
    # entropy 0.2 → 0.1 / 0.3 (mean 0.2, sd 0.141); clip share mean over steps 0.05; KL 0.01
    assert qwen[8:] == ["0.200 → 0.200 ± 0.141", "0.0500 ± 0.000", "0.0100 ± 0.000", "2"]
    internvl = [c.strip() for c in rows[1].split("|")[1:-1]]
    assert internvl[3:8] == ["1.000", "+0.000 ± 0.000", "0.250", "+0.000 ± 0.000", "+0.000 ± 0.000"]


def test_curves_png_written(tmp_path):
    plot_curves(RESULT, tmp_path / "curves.png")
    assert (tmp_path / "curves.png").stat().st_size > 0
