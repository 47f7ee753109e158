"""Which single-image skills does each tiny VLM learn from *pixels* within the warm-start budget?

Why: the toy experiment (configs/science/) must run on pictures, so its two skills have to be ones the tiny
random VLMs can actually read from an image in a short supervised warm start. For every (model, skill) this
trains a fresh base on gold labels of that skill alone (pixels, the warm-start recipe of
:mod:`corl_vl.science.warm_start`) and reports greedy accuracy on a validation set (synthetic ``train`` split,
its own generator seed — never the test split the experiment reports on), with the real pictures and with the
pictures blanked (white): a skill read from pixels must fall to chance when blanked.

    OMP_NUM_THREADS=1 python benchmarks/science/pixel_skills.py --steps 150
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from corl_vl.paths import configure_cache_env  # noqa: E402

SKILLS = [
    "spot_color",
    "spot_quadrant",
    "spot_size",
    "count_blobs",
    "tallest_bar",
    "figure_color",
    "ground_color",
]
MODELS = ["tiny-qwen2.5-vl", "tiny-internvl3.5"]
CHANCE = {  # 1 / number of classes
    **dict.fromkeys(["spot_color", "figure_color", "ground_color", "shape_color", "shape_sides"], 1 / 6),
    "spot_quadrant": 1 / 4,
    "spot_size": 1 / 2,
    "count_blobs": 1 / 4,
    "tallest_bar": 1 / 3,
}
VALIDATION_SEED = 3000


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=MODELS)
    parser.add_argument("--skills", nargs="+", default=SKILLS)
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--labels", type=int, default=1024, help="labelled problems per skill")
    parser.add_argument("--validation", type=int, default=96, help="validation problems per skill")
    parser.add_argument("--output", default=str(ROOT / "benchmarks/science/results/pixel_skills.json"))
    args = parser.parse_args(argv)
    configure_cache_env()

    import torch

    from corl_vl.data.synth import generate_problems
    from corl_vl.eval.greedy import blank_images, heldout_accuracy
    from corl_vl.science.warm_start import WarmStartSpec, train_warm_start

    torch.set_num_threads(1)
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    rows = json.loads(out.read_text())["rows"] if out.exists() else []
    done = {(r["model"], r["skill"], r["steps"], r["lr"]) for r in rows}
    for skill in args.skills:
        val = generate_problems(args.validation, seed=VALIDATION_SEED, split="train", skills=[skill])
        for model in args.models:
            if (model, skill, args.steps, args.lr) in done:
                continue
            spec = WarmStartSpec(
                model=model,
                strong_skills=(skill,),
                labels_per_skill=args.labels,
                text_view=False,
                steps=args.steps,
                lr=args.lr,
            )
            t0 = time.perf_counter()
            adapter, net, record = train_warm_start(spec)
            real = heldout_accuracy(adapter, net, val, max_new_tokens=12)
            blank = heldout_accuracy(adapter, net, blank_images(val), max_new_tokens=12)
            row = {
                "model": model,
                "skill": skill,
                "steps": args.steps,
                "lr": args.lr,
                "labels": args.labels,
                "validation": real.per_skill[skill],
                "blanked": blank.per_skill[skill],
                "chance": CHANCE.get(skill),
                "parsed": real.parsed,
                "first_loss": record["first_loss"],
                "last_loss": record["last_loss"],
                "seconds": round(time.perf_counter() - t0, 1),
            }
            rows.append(row)
            print(json.dumps(row), flush=True)
            cmd = "OMP_NUM_THREADS=1 .venv/bin/python " + " ".join(shlex.quote(a) for a in sys.argv)
            out.write_text(json.dumps({"command": cmd, "rows": rows}, indent=1))
    print(table(rows))
    return 0


def table(rows: list[dict]) -> str:
    lines = [
        "| model | skill | steps | lr | validation | blanked | chance | last loss | seconds |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['model']} | {r['skill']} | {r['steps']} | {r['lr']:g} | {r['validation']:.2f} | "
            f"{r['blanked']:.2f} | {r['chance']:.2f} | {r['last_loss']:.3f} | {r['seconds']:.0f} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
