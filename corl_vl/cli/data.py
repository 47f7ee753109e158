"""``corl-vl data``: make and prepare training data (``data synth`` writes synthetic visual math, ``data prepare``
stages a named recipe such as ``mmr1-math`` into a local folder for machines without internet).

Each action is a sub-subcommand registered by its own ``_register_<action>`` function below, so adding one
(e.g. ``data rephrase``) touches only this file's ``register`` list and a new function.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from corl_vl.data.dataset_recipes import RECIPES, get_recipe, prepare, split_recipe_name
from corl_vl.errors import CorlError
from corl_vl.io import check_dataset_output


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "data",
        help="make and prepare datasets (synthetic visual math, ...)",
        description="Make and prepare datasets of problems for training and evaluation.",
    )
    actions = parser.add_subparsers(dest="data_command", metavar="ACTION")
    actions.required = True
    _register_synth(actions)
    _register_rephrase(actions)
    _register_prepare(actions)
    # Further actions register here, one `_register_<action>(actions)` function each.


# --- data synth -----------------------------------------------------------------------------------------


def _register_synth(actions: argparse._SubParsersAction) -> None:
    parser = actions.add_parser(
        "synth",
        help="write a synthetic visual-math dataset (train/test splits, image and text renderings)",
        description=(
            "Draw visual math problems with known answers (counting shapes, adding printed numbers, comparing "
            "bars, reading charts, polygon sides) and save them as a Hugging Face DatasetDict folder with "
            "splits train and test. Deterministic by --seed; the splits never share a problem."
        ),
    )
    parser.add_argument("--out", required=True, type=Path, help="output folder (written atomically)")
    parser.add_argument("--n", required=True, type=int, help="number of train problems")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    parser.add_argument("--test-n", type=int, help="number of test problems (default N // 4)")
    parser.add_argument(
        "--skills",
        help="comma-separated skills (default: the five visual-math skills; the extra shape and pixel skills, e.g. figure_color, on request)",
    )
    parser.add_argument("--overwrite", action="store_true", help="replace --out if it exists")
    parser.set_defaults(func=run_synth)


def run_synth(args: argparse.Namespace) -> int:
    # lazy: PIL
    from corl_vl.data.synth import generate_problems, skill_summary, write_dataset

    test_n = args.n // 4 if args.test_n is None else args.test_n
    if args.n < 0 or test_n < 0:
        raise CorlError(f"--n and --test-n must be >= 0 (got {args.n} and {test_n})")
    skills = None  # generate_problems rejects unknown or empty skill lists with the list of what exists
    if args.skills is not None:
        skills = [name.strip() for name in args.skills.split(",") if name.strip()]
    replace = check_dataset_output(args.out, overwrite=args.overwrite)  # never `.`, a file, other folders
    splits = {
        "train": generate_problems(args.n, seed=args.seed, split="train", skills=skills),
        "test": generate_problems(test_n, seed=args.seed, split="test", skills=skills),
    }
    out = write_dataset(splits, args.out, overwrite=replace)
    print(skill_summary(splits))
    print(f"wrote {out} (load with corl_vl.data.load_problems or datasets.load_from_disk)")
    return 0


# --- data rephrase --------------------------------------------------------------------------------------


def _register_rephrase(actions: argparse._SubParsersAction) -> None:
    parser = actions.add_parser(
        "rephrase",
        help="write an answer-preserving rephrased view of a dataset with any supported LLM",
        description=(
            "Rewrite every question with a model (a preset or a checkpoint folder; vision models run text-only), "
            "keeping ids, answers, options and images, and write a paired view for agents.<name>.data_view. "
            "Greedy by default. A rewrite that is empty, too long or drops a number of the original is replaced "
            "by the original question and counted (a cheap guard, not a guarantee that the answer is kept)."
        ),
    )
    parser.add_argument("--model", required=True, help="preset name or local checkpoint folder")
    parser.add_argument("--adapter", help="adapter name when --model is a folder the registry cannot infer")
    parser.add_argument("--data", required=True, type=Path, help="problems (file or save_to_disk folder)")
    parser.add_argument("--split", help="split of a DatasetDict folder")
    parser.add_argument(
        "--text-only", action="store_true", help="rewrite the text rendering (text_question column)"
    )
    parser.add_argument(
        "--out", required=True, type=Path, help="*.jsonl, or any other name for a save_to_disk folder"
    )
    parser.add_argument("--limit", type=int, help="only the first N problems")
    parser.add_argument("--engine", choices=("hf", "vllm"), default="hf", help="rollout engine (default hf)")
    parser.add_argument("--max-new-tokens", type=int, default=512, help="rewrite length cap (default 512)")
    parser.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    parser.add_argument("--seed", type=int, default=0, help="sampling seed (default 0)")
    parser.add_argument("--batch-size", type=int, default=8, help="prompts per engine call (default 8)")
    parser.add_argument("--device", default="cpu", help="torch device for the hf engine (default cpu)")
    parser.add_argument("--overwrite", action="store_true", help="replace --out if it exists")
    parser.set_defaults(func=run_rephrase)


def run_rephrase(args: argparse.Namespace) -> int:
    # lazy: PIL, cli-help
    from corl_vl.data.datasets import load_problems
    from corl_vl.data.rephrase import write_view
    from corl_vl.eval.rephrase import rephrase

    overwrite = args.overwrite
    if args.out.suffix != ".jsonl":  # a dataset folder: never `.`, a file or a folder of other files
        overwrite = check_dataset_output(args.out, overwrite=args.overwrite)
    elif args.out.exists() and not args.overwrite:
        raise CorlError(f"{args.out} already exists (use --overwrite to replace it)")
    split = args.split
    problems = load_problems(args.data, split=split, limit=args.limit, text_only=args.text_only)
    if not problems:
        raise CorlError(f"{args.data}: no problems to rephrase")
    result = rephrase(
        problems,
        args.model,
        adapter=args.adapter,
        engine=args.engine,
        max_new_tokens=args.max_new_tokens,
        temperature=args.temperature,
        seed=args.seed,
        batch_size=args.batch_size,
        device=args.device,
    )
    out = write_view(result.problems, args.out, overwrite=overwrite)
    reasons = ", ".join(f"{k}: {v}" for k, v in sorted(result.replaced.items())) or "none"
    print(
        f"rephrased {len(problems) - result.n_replaced}/{len(problems)} problems; "
        f"{result.n_replaced} kept the original question ({reasons})"
    )
    print(f"wrote {out} (use as agents.<name>.data_view; it loads with corl_vl.data.load_paired_view)")
    return 0


# --- data prepare ---------------------------------------------------------------------------------------


def _register_prepare(actions: argparse._SubParsersAction) -> None:
    listing = "; ".join(f"{r.name}: {r.hub_id} ({r.keep_description})" for r in RECIPES.values())
    parser = actions.add_parser(
        "prepare",
        help="download a data recipe (mmr1-math, open-r1-8k, math-l3-5) into a local folder",
        description=(
            "Read a recipe's hub dataset, normalise it (id, question, answer, images), apply its filter and save "
            "it as a datasets save_to_disk folder that data.train accepts. Run it where there is internet (or "
            f"point --source at a downloaded copy of the hub repository). Recipes: {listing}."
        ),
    )
    parser.add_argument("name", metavar="NAME", help=f"recipe, optionally NAME@split ({', '.join(RECIPES)})")
    parser.add_argument("--out", required=True, type=Path, help="output folder (written atomically)")
    parser.add_argument(
        "--source",
        type=Path,
        help="a local copy of the recipe's hub repository (e.g. from `hf download`) instead of the hub",
    )
    parser.add_argument("--limit", type=int, help="keep only the first N rows after filtering")
    parser.add_argument("--overwrite", action="store_true", help="replace --out if it exists")
    parser.set_defaults(func=run_prepare)


def run_prepare(args: argparse.Namespace) -> int:
    if args.limit is not None and args.limit < 1:
        raise CorlError(f"--limit must be positive, got {args.limit}")
    if args.source is not None and not args.source.is_dir():
        raise CorlError(f"--source {args.source}: no such folder")
    recipe = get_recipe(split_recipe_name(args.name)[0])
    replace = check_dataset_output(args.out, overwrite=args.overwrite)
    out, rows = prepare(args.name, args.out, source=args.source, limit=args.limit, overwrite=replace)
    print(f"{recipe.name}: {rows} problems from {args.source or recipe.hub_id} ({recipe.keep_description})")
    print(f"wrote {out} (train on it with --set data.train={out})")
    return 0
