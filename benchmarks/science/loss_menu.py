"""The loss menu side by side on the toy: the default Co-RL demo under each policy loss and each rollout correction,
held-out accuracy per skill before and after, over RL seeds (issue 41, item 6).

Why: users compare RL methods by switching one name (``grpo.policy_loss``, ``grpo.rollout_correction``); this runs
every name on the same warm-started demo (``corl_vl.demo_config()``: same bases, pictures and problems), each arm
changing that one setting and nothing else — no arm is tuned. Two things to know when reading the table:
- with one update per rollout batch (the demo's) every ratio to the old policy is 1, so CISPO's and SAPO's gradients
  equal PPO-clip's; ``--set grpo.updates_per_batch=2`` (for every arm alike) lets the losses differ;
- on CPU the HF engine samples with the trainer's own fp32 numerics, so the rollout ↔ trainer ratios are ≈ 1 and the
  corrections act on little; their arms matter with vLLM in bf16 on a GPU.

    OMP_NUM_THREADS=1 python benchmarks/science/loss_menu.py --seeds 0 1 2 --steps 10 --every 5 \\
        --per-skill 16 --output-dir benchmarks/science/results_loss_menu

Outputs (``--output-dir``, as benchmarks/science/forgetting_sweep.py): ``results.json``, ``table.md`` (per arm and
agent: strong / weak / overall change, mean ± sd over seeds; entropy; clip share; KL), ``curves.png``,
``command.txt``. ``--merge DIR …`` combines folders of runs made apart.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.science.forgetting_sweep import arm_sweep  # noqa: E402
from corl_vl.losses.policy_losses import POLICY_LOSSES  # noqa: E402
from corl_vl.losses.rollout_correction import MODES  # noqa: E402

# arm → the --set overrides on corl_vl.demo_config(): one name each, read from the tables (a new entry is an arm)
ARMS: dict[str, dict[str, Any]] = {
    **{f"loss_{name}": {"set": [f"grpo.policy_loss={name}"]} for name in POLICY_LOSSES},
    **{f"correction_{mode}": {"set": [f"grpo.rollout_correction={mode}"]} for mode in MODES},
}


def main(argv: list[str] | None = None) -> int:
    description = __doc__.splitlines()[0]
    return arm_sweep(argv, description, ARMS, seeds=[0, 1, 2], every=5, output="runs/loss_menu", baseline=[])


if __name__ == "__main__":
    sys.exit(main())
