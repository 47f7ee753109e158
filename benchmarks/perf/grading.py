"""Grading throughput: corl-vl's ``grade`` vs plain ``math_verify.parse`` + ``verify``, side by side.

Builds a response set from real benchmark answers (``--data`` = the folder holding ``math500/test.json`` and
``mathvista/testmini.json``): every MATH-500 gold answer rendered as a boxed final answer in several
equivalent spellings (identical, re-spaced, ``\\dfrac``, decimal/thousands forms) and non-equivalent ones
(the first number off by one, else an extra term), plus MathVista multiple-choice answers as letters and option values.
Each response has a known verdict by construction. Both graders see the same (response, gold) pairs; the
script prints throughput, the ratio, accuracy against the constructed verdicts, and disagreements with
examples (split into "math-verify right" and "math-verify wrong").

    python benchmarks/perf/grading.py --data ../shared/benchmarks [--limit 500] [--threads N]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

PREAMBLE = (
    "Let us set up the problem. Write $f(x) = x^2 - 3x + 2$, so $f(1) = 0$ and $f(2) = 0$; by Vieta the roots "
    "sum to $3$. Checking the constraint $\\frac{a}{b} \\le 1$ again, the computation is consistent.\n"
)


def respond(answer: str) -> str:
    return f"{PREAMBLE}Therefore, the final answer is $\\boxed{{{answer}}}$."


def math500_cases(path: Path, limit: int) -> list[dict]:
    """(response, gold, expected) for MATH-500 answers in equivalent and non-equivalent spellings."""
    rows = json.loads(path.read_text())[:limit]
    cases = []
    for row in rows:
        gold = row["answer"]
        forms = {gold: True, gold.replace(" ", ""): True, gold.replace("\\frac", "\\dfrac"): True}
        m = re.fullmatch(r"\\frac\{(\d+)\}\{(\d+)\}", gold)
        if m:
            forms[f"{m.group(1)}/{m.group(2)}"] = True
            num, den = int(m.group(1)), int(m.group(2))
            forms[f"\\frac{{{num + 1}}}{{{den}}}"] = False
        if re.fullmatch(r"-?\d+", gold):
            n = int(gold)
            forms[f"{n}.0"] = True
            forms[f"{n:,}"] = True
            forms[str(n + 1)] = False
        elif re.search(r"\d+", gold):  # a typical wrong answer: one number off by one
            forms[re.sub(r"\d+", lambda d: str(int(d.group(0)) + 1), gold, count=1)] = False
        else:
            forms[f"{gold}+1"] = False
        for form, expected in forms.items():
            cases.append({"source": "math500", "response": respond(form), "gold": gold, "expected": expected})
    return cases


def mathvista_cases(path: Path, limit: int) -> list[dict]:
    """Multiple-choice answers as the right letter, the right value, and a wrong letter."""
    rows = [r for r in json.loads(path.read_text()).values() if r["question_type"] == "multi_choice"][:limit]
    cases = []
    for r in rows:
        choices, gold = r["choices"], r["answer"]
        k = choices.index(gold)
        wrong = (k + 1) % len(choices)
        for form, expected in (
            (f"({chr(65 + k)})", True),
            (gold, True),
            (f"({chr(65 + wrong)})", choices[wrong] == gold),
        ):
            cases.append(
                {"source": "mathvista", "response": respond(form), "gold": gold, "choices": choices,
                 "expected": expected}
            )  # fmt: skip
    return cases


def run_ours(cases: list[dict], threads: int, timeout: float) -> tuple[list[bool], float]:
    from corl_vl.answers import clear_cache, grade

    clear_cache()

    def one(c: dict) -> bool:
        return grade(c["response"], c["gold"], choices=c.get("choices"), timeout=timeout).correct

    start = time.perf_counter()
    if threads <= 1:
        verdicts = [one(c) for c in cases]
    else:
        with ThreadPoolExecutor(threads) as pool:
            verdicts = list(pool.map(one, cases))
    return verdicts, time.perf_counter() - start


def run_math_verify(cases: list[dict]) -> tuple[list[bool], float]:
    """Plain math-verify as documented: parse both, verify(gold, pred), its own (main-thread) timeouts."""
    from math_verify import parse, verify

    start = time.perf_counter()
    verdicts = []
    for c in cases:
        gold = parse(f"${c['gold']}$")
        pred = parse(c["response"])
        verdicts.append(bool(verify(gold, pred)))
    return verdicts, time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data", type=Path, required=True, help="folder with math500/ and mathvista/")
    parser.add_argument(
        "--limit", type=int, default=500, help="MATH-500 problems to use (MathVista: limit/2)"
    )
    parser.add_argument(
        "--threads", type=int, default=os.cpu_count() or 1, help="threads for the parallel run"
    )
    parser.add_argument("--timeout", type=float, default=5.0)
    parser.add_argument("--examples", type=int, default=5)
    args = parser.parse_args(argv)
    logging.disable(logging.WARNING)

    cases = math500_cases(args.data / "math500" / "test.json", args.limit)
    cases += mathvista_cases(args.data / "mathvista" / "testmini.json", args.limit // 2)
    n = len(cases)
    print(f"{n} (response, gold) pairs: {sum(c['source'] == 'math500' for c in cases)} MATH-500, "
          f"{sum(c['source'] == 'mathvista' for c in cases)} MathVista multiple choice")  # fmt: skip

    from corl_vl.answers.mathverify_pool import get_pool, set_max_workers

    start = time.perf_counter()
    set_max_workers(max(1, args.threads)).warm_up(max(1, args.threads))
    print(
        f"math-verify worker start-up (once per process, not timed below): {time.perf_counter() - start:.2f} s"
    )

    ours, t_ours = run_ours(cases, 1, args.timeout)
    ours_mt, t_ours_mt = run_ours(cases, args.threads, args.timeout)
    mv, t_mv = run_math_verify(cases)
    assert ours == ours_mt, "threaded grading must give the same verdicts"

    print(f"\n{'grader':<34}{'pairs/s':>10}{'total s':>10}{'accuracy':>10}")
    for name, verdicts, seconds in (
        ("math_verify parse+verify (1 thread)", mv, t_mv),
        ("corl-vl grade (1 thread)", ours, t_ours),
        (f"corl-vl grade ({args.threads} threads)", ours_mt, t_ours_mt),
    ):
        acc = sum(v == c["expected"] for v, c in zip(verdicts, cases)) / n
        print(f"{name:<34}{n / seconds:>10.0f}{seconds:>10.2f}{acc:>10.4f}")
    print(
        f"\nspeed-up, 1 thread: {t_mv / t_ours:.1f}x   with {args.threads} threads: {t_mv / t_ours_mt:.1f}x"
    )
    print(f"math-verify timeouts in our pool: {get_pool().timeouts}")

    differ = [(c, o, m) for c, o, m in zip(cases, ours, mv) if o != m]
    mv_right = [d for d in differ if d[2] == d[0]["expected"]]
    mv_wrong = [d for d in differ if d[2] != d[0]["expected"]]
    print(
        f"\ndisagreements: {len(differ)}  (math-verify right: {len(mv_right)}, math-verify wrong: {len(mv_wrong)})"
    )
    for title, rows in (
        ("math-verify right, ours wrong", mv_right),
        ("math-verify wrong, ours right", mv_wrong),
    ):
        if rows:
            print(f"-- {title} (first {args.examples}):")
        for c, o, m in rows[: args.examples]:
            boxed = c["response"].rsplit("\\boxed{", 1)[1][:-3]
            print(f"   [{c['source']}] gold={c['gold']!r} pred={boxed!r} ours={o} math-verify={m}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
