"""MathVerse official scoring against known truth: gold given back as the response, and a seeded 70 / 30 mix.

1. Gold as response: every record answered ``\\boxed{gold}``; the share scored correct by ``official`` (the
   judge's rule), ``quick-match`` (``--quick_match``) and ``verified``. The truth is 1.
2. Seeded mix: each record answered right (a random form that states its gold: boxed, "The answer is …", the
   raw gold, the letter, the option text, "X. text") with probability 0.7, else wrong (another option's letter,
   or another record's gold whose value differs). The truth is the share answered right; ``official`` must
   come within 0.01 of it.

    python benchmarks/grading/mathverse_official.py --data DIR/mathverse/testmini_text_only.json \\
        [--seed 0] [--json results/mathverse_official.json]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

from corl_vl.answers.normalize import canonical
from corl_vl.answers.options import parse_options
from corl_vl.answers.units import value_of
from corl_vl.data.problem import Problem
from corl_vl.eval.loaders import load_benchmark
from corl_vl.eval.scoring import get_scorer, score_responses
from corl_vl.eval.scoring.consistency import forms

MODES = ("official", "quick-match", "verified")


def _overall(problems: list[Problem], responses: dict[str, list[str]], mode: str) -> float:
    results, _ = score_responses("mathverse", problems, responses, scoring=mode)
    return results["overall"]


def _wrong(problem: Problem, golds: list[str], rng: random.Random) -> str:
    """A response that is wrong by construction: another option's letter, or another record's gold whose
    value differs from this one's."""
    gold = (problem.answer or "").strip()
    choices = get_scorer("mathverse").choices(problem)
    if choices:
        letters = parse_options(choices).letters
        if gold in letters and len(letters) > 1:
            other = letters[(letters.index(gold) + 1 + rng.randrange(len(letters) - 1)) % len(letters)]
            return f"\\boxed{{{other}}}"
    mine = canonical(value_of(gold)[0])
    while True:
        donor = rng.choice(golds)
        if canonical(value_of(donor)[0]) != mine and not set(donor) <= set("ABCDEFGH,\n "):
            return f"The answer is \\boxed{{{donor}}}."


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--right", type=float, default=0.7)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    problems = load_benchmark("mathverse", args.data, annotations_only=True)
    scorer = get_scorer("mathverse")
    gold = {p.id: [f"\\boxed{{{(p.answer or '').strip()}}}"] for p in problems}
    out: dict[str, object] = {"records": len(problems)}
    out["gold_as_response"] = {mode: _overall(problems, gold, mode) for mode in MODES}
    rng = random.Random(args.seed)
    golds = [(p.answer or "").strip() for p in problems]
    mixed: dict[str, list[str]] = {}
    right = 0
    for p in problems:
        if rng.random() < args.right:
            named = forms("mathverse", p, scorer.choices(p))
            mixed[p.id] = [named[rng.choice(sorted(named))]]
            right += 1
        else:
            mixed[p.id] = [_wrong(p, golds, rng)]
    truth = right / len(problems)
    scored = {mode: _overall(problems, mixed, mode) for mode in MODES}
    out["seeded_mix"] = {
        "seed": args.seed,
        "truth": truth,
        **scored,
        **{f"{mode}_error": scored[mode] - truth for mode in MODES},
    }
    print(json.dumps(out, indent=1))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
