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

import argparse
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.science.forgetting_sweep import _command, merge, run_arm, write_report  # noqa: E402
from corl_vl.paths import configure_cache_env  # noqa: E402
from corl_vl.train.policy_losses import POLICY_LOSSES  # noqa: E402
from corl_vl.train.rollout_correction import MODES  # noqa: E402

# arm → the --set overrides on corl_vl.demo_config(): one name each, read from the tables (a new entry is an arm)
ARMS: dict[str, dict[str, Any]] = {
    **{f"loss_{name}": {"set": [f"grpo.policy_loss={name}"]} for name in POLICY_LOSSES},
    **{f"correction_{mode}": {"set": [f"grpo.rollout_correction={mode}"]} for mode in MODES},
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arms", nargs="+", default=list(ARMS), choices=list(ARMS))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="RL seeds (train.seed)")
    parser.add_argument("--steps", type=int, default=10, help="train.max_steps")
    parser.add_argument("--every", type=int, default=5, help="held-out evaluation every N steps")
    parser.add_argument("--per-skill", type=int, default=16, help="held-out problems per skill")
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="for every arm alike")
    parser.add_argument("--output-dir", default=str(ROOT / "runs/loss_menu"))
    parser.add_argument(
        "--merge", nargs="+", metavar="DIR", help="no training: combine these folders' results"
    )
    args = parser.parse_args(argv)
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    if args.merge:
        return merge([Path(f) for f in args.merge], out)
    configure_cache_env()

    import torch

    torch.set_num_threads(1)
    t_start = time.perf_counter()
    common = [
        f"train.max_steps={args.steps}",
        f"experiment.heldout.every={args.every}",
        f"experiment.heldout.per_skill={args.per_skill}",
        "train.log_entropy=true",
        "train.plot=false",
        "train.report_to=[none]",
        *args.set,
    ]
    result: dict[str, Any] = {"common": common, "arms": {a: ARMS[a] for a in args.arms}, "runs": []}
    for seed in args.seeds:
        for arm in args.arms:
            started = time.perf_counter()
            folder = out / "runs" / f"{arm}-seed{seed}"
            rec = run_arm(arm, seed, common, folder, arms=ARMS, baseline=[])
            rec["seconds"] = time.perf_counter() - started
            result["runs"].append(rec)
            result["seconds"] = time.perf_counter() - t_start
            write_report(result, out, f"{_command()}\n# wall time so far: {result['seconds']:.0f} s\n")
            last = rec["evals"][-1]
            print(
                f"[{result['seconds']:6.0f}s] {arm} seed {seed}: "
                + "  ".join(f"{a}: {last[a]['per_skill']}" for a in rec["agents"]),
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
