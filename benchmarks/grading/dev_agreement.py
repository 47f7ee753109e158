"""Agreement of corl-vl's scoring with the benchmarks' own verdicts on real, officially graded responses.

Input: a folder of JSONL files, one per (benchmark, model), each line with ``id``, ``response``, ``answer``, the
benchmark's fields (MathVista ``choices``/``question_type``/``answer_type``/``precision``; MathVision
``options``) and the official verdict ``official_correct`` (optionally ``official_extraction``). The benchmark is
read from the file name prefix (``mathvista_…``, ``mathvision_…``).

For each file it prints: per-item agreement of ``official`` scoring (rule-based extraction) with the official
verdicts, both overalls, and the records where lenient ``verified`` accepts what the official verdict rejects
(to be reviewed: an official-script error, or a false accept of ours). ``--json OUT`` writes everything.

    python benchmarks/grading/dev_agreement.py --data DIR [--json results/dev_agreement.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from corl_vl.data.problem import Problem
from corl_vl.eval.scoring import score_responses
from corl_vl.io import read_jsonl


def to_problem(benchmark: str, row: dict) -> Problem:
    """A dev row as the benchmark loader would give it (annotations only)."""
    if benchmark == "mathvista":
        meta = {k: row.get(k) for k in ("question_type", "answer_type", "precision", "unit")}
        choices = row.get("choices") if row.get("question_type") == "multi_choice" else None
        return Problem(str(row["id"]), "", choices=choices, answer=str(row["answer"]), meta=meta)
    return Problem(str(row["id"]), "", choices=row.get("options") or None, answer=str(row["answer"]))


def measure(path: Path) -> dict:
    benchmark = path.name.split("_", 1)[0]
    rows = [row for _, row in read_jsonl(path)]
    problems = [to_problem(benchmark, r) for r in rows]
    responses = {str(r["id"]): [r["response"]] for r in rows}
    start = time.perf_counter()
    _, records = score_responses(benchmark, problems, responses)
    seconds = time.perf_counter() - start
    official = {str(r["id"]): bool(r["official_correct"]) for r in rows}
    ours = {i: rec.correct_official[0] for i, rec in records.items()}
    verified = {i: rec.correct_verified[0] for i, rec in records.items()}
    disagree = [i for i in official if ours[i] != official[i]]
    extra_accepts = [
        {
            "id": i,
            "answer": r["answer"],
            "extracted": records[i].extracted[0],
        }
        for r in rows
        if verified[(i := str(r["id"]))] and not official[i]
    ]
    n = len(rows)
    return {
        "file": path.name,
        "benchmark": benchmark,
        "records": n,
        "agreement_official": 1 - len(disagree) / n,
        "overall_official_ours": sum(ours.values()) / n,
        "overall_official_published": sum(official.values()) / n,
        "overall_verified": sum(verified.values()) / n,
        "official_disagreements": disagree,
        "verified_accepts_officially_wrong": extra_accepts,
        "verified_rejects_officially_right": [i for i in official if official[i] and not verified[i]],
        "seconds": seconds,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data", type=Path, required=True, help="folder of officially graded JSONL files")
    parser.add_argument("--json", type=Path, help="write all measurements here")
    args = parser.parse_args(argv)
    files = sorted(
        p for p in args.data.glob("*.jsonl") if p.name.split("_", 1)[0] in ("mathvista", "mathvision")
    )
    if not files:
        print(f"no mathvista_*.jsonl / mathvision_*.jsonl in {args.data}", file=sys.stderr)
        return 2
    out = []
    print(
        "| file | records | agreement (official) | overall ours | overall published | Δ | verified | verified-only accepts |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for path in files:
        m = measure(path)
        out.append(m)
        delta = m["overall_official_ours"] - m["overall_official_published"]
        print(
            f"| {m['file']} | {m['records']} | {m['agreement_official']:.4f} | {m['overall_official_ours']:.4f} "
            f"| {m['overall_official_published']:.4f} | {delta:+.4f} | {m['overall_verified']:.4f} "
            f"| {len(m['verified_accepts_officially_wrong'])} |"
        )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
