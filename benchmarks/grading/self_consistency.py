"""Self-consistency on whole benchmarks: a response that states a record's own gold answer is graded correct.

For every record of each benchmark (loaded by corl-vl's own loader, annotations only), the forms of
``corl_vl.eval.scoring.consistency.forms`` are scored in both modes. Prints, per benchmark and mode, the share
of records all of whose forms are correct, and writes every failure with ``--json``.

    python benchmarks/grading/self_consistency.py --data DIR [--json results/self_consistency.json]

``DIR`` holds the benchmarks' own files: ``mathverse/testmini_text_only.json``, ``we-math/testmini.json``,
``mathvista/testmini.json``, ``math-v/testmini.jsonl``, ``math500/test.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path

from corl_vl.eval.loaders import load_benchmark
from corl_vl.eval.scoring.consistency import check

FILES = {
    "mathverse": "mathverse/testmini_text_only.json",
    "wemath": "we-math/testmini.json",
    "mathvista": "mathvista/testmini.json",
    "mathvision": "math-v/testmini.jsonl",
    "math500": "math500/test.json",
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--benchmark", action="append", choices=sorted(FILES))
    args = parser.parse_args()
    out = {}
    for name in args.benchmark or FILES:
        problems = load_benchmark(name, args.data / FILES[name], annotations_only=True)
        start = time.perf_counter()
        result = check(name, problems)
        seconds = time.perf_counter() - start
        by_form = Counter(f"{f['mode']}/{f['form']}" for f in result.failures)
        print(
            f"{name}: {result.records} records, official {result.rate('official'):.4f} "
            f"({result.records_failed.get('official', 0)} records fail; {result.excepted} forms excepted), "
            f"verified {result.rate('verified'):.4f} ({result.records_failed.get('verified', 0)} records fail) "
            f"[{seconds:.1f} s] {dict(by_form)}"
        )
        out[name] = {
            "records": result.records,
            "official": result.rate("official"),
            "verified": result.rate("verified"),
            "records_failed": result.records_failed,
            "forms_tried": result.tried,
            "forms_failed": result.failed,
            "official_exceptions": result.excepted,
            "failures": result.failures,
        }
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
