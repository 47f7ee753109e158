"""Run a random share of the test suite in a shuffled order: CI's check that tests stand alone (no test may
rely on another having run first, or on a fixture another test changed).

    python scripts/random_tests.py                  # 10 % of the tests, a fresh seed (printed)
    python scripts/random_tests.py --seed 1234      # the same selection and order again
    python scripts/random_tests.py --share 1.0 -- -m "not slow"   # every fast test, shuffled

The chosen tests run in one pytest session, in the shuffled order (pytest keeps the order of the node ids it
is given), so a test that passes only after another one fails here sooner or later. With ``--workers N`` the
session has N xdist workers, each running its share of the shuffled order (``--dist load`` hands the ids out
in the given order).
"""

from __future__ import annotations

import argparse
import random
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def collect(extra: list[str]) -> list[str]:
    """Node ids of the suite (one per parametrised case)."""
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", *extra],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode not in (0, 5):
        sys.exit(f"collection failed:\n{out.stdout}{out.stderr}")
    return [line for line in out.stdout.splitlines() if "::" in line]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--share", type=float, default=0.1, help="share of the tests to run (default 0.1)")
    parser.add_argument("--seed", type=int, default=None, help="selection and order seed (default: random)")
    parser.add_argument(
        "--workers", type=int, default=0, help="pytest-xdist workers (default 0: one process)"
    )
    parser.add_argument("pytest_args", nargs="*", help="extra pytest arguments, e.g. -m 'not slow'")
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**31)
    tests = collect(args.pytest_args)
    rng = random.Random(seed)
    chosen = rng.sample(tests, max(1, round(len(tests) * args.share))) if tests else []
    print(f"random tests: {len(chosen)} of {len(tests)}, seed {seed} (rerun: --seed {seed})", flush=True)
    if not chosen:
        return 0
    workers = ["-n", str(args.workers), "--dist", "load"] if args.workers > 0 else []
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        *workers,
        *args.pytest_args,
        *chosen,
    ]
    return subprocess.run(command, cwd=ROOT, check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
