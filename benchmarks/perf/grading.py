"""Grading throughput: corl-vl's ``grade`` vs plain ``math_verify.parse`` + ``verify``, side by side.

Builds a response set from real benchmark answers (``--data`` = the folder holding ``math500/test.json`` and
``mathvista/testmini.json``): every MATH-500 gold answer rendered as a boxed final answer in several
equivalent spellings (identical, re-spaced, ``\\dfrac``, decimal/thousands forms) and non-equivalent ones
(the first number off by one, else an extra term), plus MathVista multiple-choice answers as letters and option values.
Each response has a known verdict by construction. Both graders see the same (response, gold) pairs in the
same process, after start-up (our math-verify workers started, math-verify's grammars loaded) and with the
arms alternating when ``--repeat`` > 1. The script prints single-thread throughput of both (medians), the
ratio, our throughput with no cache at all and with threads, accuracy against the constructed verdicts, the
pairs our grader still hands to math-verify, and disagreements with examples (split into "math-verify right,
ours wrong" and "math-verify wrong, ours right").

    python benchmarks/perf/grading.py --data PATH/TO/benchmarks [--limit 500] [--threads N] [--repeat R]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import statistics
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
                {
                    "source": "mathvista",
                    "response": respond(form),
                    "gold": gold,
                    "choices": choices,
                    "expected": expected,
                }
            )
    return cases


def _clear_all_caches() -> None:
    from corl_vl.answers import clear_cache
    from corl_vl.answers.structures import clear_caches

    clear_cache()
    clear_caches()


def run_ours(
    cases: list[dict], threads: int, timeout: float, *, no_cache: bool = False
) -> tuple[list[bool], float]:
    """corl-vl ``grade`` over the cases. Every cache (verdicts and per-string work) is emptied first, so only
    repeats inside this pass hit it — as in training, where one gold meets K rollouts of several agents.
    ``no_cache`` empties them before every pair as well (the worst case: nothing is ever seen twice)."""
    from corl_vl.answers import grade

    _clear_all_caches()

    def one(c: dict) -> bool:
        if no_cache:
            _clear_all_caches()
        return grade(c["response"], c["gold"], choices=c.get("choices"), timeout=timeout).correct

    start = time.perf_counter()
    if threads <= 1:
        verdicts = [one(c) for c in cases]
    else:
        with ThreadPoolExecutor(threads) as pool:
            verdicts = list(pool.map(one, cases))
    return verdicts, time.perf_counter() - start


def warm_math_verify() -> None:
    """Load math-verify's grammars and sympy once, outside the timed loop (our workers are warmed too)."""
    from math_verify import parse, verify

    verify(parse("$\\frac{1}{2}$"), parse("The answer is $\\boxed{0.5}$."))


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


class _CountCalls:
    """Counts the pairs our grader hands to its math-verify workers, and their wall time."""

    def __init__(self) -> None:
        from corl_vl.answers import mathverify_pool

        self.module, self.original = mathverify_pool, mathverify_pool.check
        self.calls: list[tuple[float, str, str]] = []
        mathverify_pool.check = self

    def __call__(self, gold: str, pred: str, timeout: float) -> bool | None:
        start = time.perf_counter()
        try:
            return self.original(gold, pred, timeout)
        finally:
            self.calls.append((time.perf_counter() - start, gold, pred))


def _print_disagreements(cases: list[dict], ours: list[bool], mv: list[bool], examples: int) -> None:
    """Where our grader and math-verify differ, split by which one matched the expected verdict."""
    differ = [(c, o, m) for c, o, m in zip(cases, ours, mv) if o != m]
    mv_right = [d for d in differ if d[2] == d[0]["expected"]]
    mv_wrong = [d for d in differ if d[2] != d[0]["expected"]]
    print(
        f"\ndisagreements: {len(differ)}  (math-verify right, ours wrong: {len(mv_right)}; "
        f"math-verify wrong, ours right: {len(mv_wrong)})"
    )
    for title, rows in (
        ("math-verify right, ours wrong", mv_right),
        ("math-verify wrong, ours right", mv_wrong),
    ):
        if rows:
            print(f"-- {title} (first {examples}):")
        for c, o, m in rows[:examples]:
            boxed = c["response"].rsplit("\\boxed{", 1)[1][:-3]
            print(f"   [{c['source']}] gold={c['gold']!r} pred={boxed!r} ours={o} math-verify={m}")


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
    parser.add_argument(
        "--repeat", type=int, default=1, help="rounds of both single-thread arms (medians are reported)"
    )
    args = parser.parse_args(argv)
    logging.disable(logging.WARNING)

    cases = math500_cases(args.data / "math500" / "test.json", args.limit)
    cases += mathvista_cases(args.data / "mathvista" / "testmini.json", args.limit // 2)
    n = len(cases)
    print(
        f"{n} (response, gold) pairs: {sum(c['source'] == 'math500' for c in cases)} MATH-500, "
        f"{sum(c['source'] == 'mathvista' for c in cases)} MathVista multiple choice"
    )

    from corl_vl.answers.mathverify_pool import get_pool, set_max_workers

    start = time.perf_counter()
    set_max_workers(max(1, args.threads)).warm_up(max(1, args.threads))
    warm_math_verify()
    print(
        f"start-up, not timed below (our workers, math-verify's grammars): {time.perf_counter() - start:.2f} s"
    )

    counter = _CountCalls()
    t_mv_runs, t_ours_runs, t_cold_runs = [], [], []
    for _ in range(max(1, args.repeat)):  # the arms alternate, so machine load hits both alike
        mv, t = run_math_verify(cases)
        t_mv_runs.append(t)
        counter.calls.clear()
        ours, t = run_ours(cases, 1, args.timeout)
        t_ours_runs.append(t)
        sent = list(counter.calls)
        ours_cold, t = run_ours(cases, 1, args.timeout, no_cache=True)
        t_cold_runs.append(t)
    ours_mt, t_ours_mt = run_ours(cases, args.threads, args.timeout)
    assert ours == ours_mt == ours_cold, "threaded and uncached grading must give the same verdicts"
    t_mv, t_ours, t_cold = (statistics.median(ts) for ts in (t_mv_runs, t_ours_runs, t_cold_runs))

    print(f"\n{'grader':<44}{'pairs/s':>10}{'total s':>10}{'accuracy':>10}")
    for name, verdicts, seconds in (
        ("math_verify parse+verify (1 thread)", mv, t_mv),
        ("corl-vl grade (1 thread)", ours, t_ours),
        ("corl-vl grade (1 thread, no cache at all)", ours_cold, t_cold),
        (f"corl-vl grade ({args.threads} threads)", ours_mt, t_ours_mt),
    ):
        acc = sum(v == c["expected"] for v, c in zip(verdicts, cases)) / n
        print(f"{name:<44}{n / seconds:>10.0f}{seconds:>10.2f}{acc:>10.4f}")
    print(
        f"\nspeed-up, 1 thread: {t_mv / t_ours:.1f}x   no cache: {t_mv / t_cold:.1f}x   "
        f"with {args.threads} threads: {t_mv / t_ours_mt:.1f}x"
    )
    if len(t_mv_runs) > 1:
        print("per round (1 thread): " + "  ".join(f"{m / o:.1f}x" for m, o in zip(t_mv_runs, t_ours_runs)))
    print(
        f"pairs sent to math-verify by our grader: {len(sent)} of {n} "
        f"({sum(d for d, _, _ in sent):.2f} s of {t_ours_runs[-1]:.2f} s); timeouts: {get_pool().timeouts}"
    )
    for seconds, gold, pred in sorted(sent, reverse=True)[: args.examples]:
        print(f"   {seconds * 1000:7.1f} ms  gold={gold!r} pred={pred!r}")

    _print_disagreements(cases, ours, mv, args.examples)
    return 0


if __name__ == "__main__":
    sys.exit(main())
