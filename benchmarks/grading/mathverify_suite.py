"""Agreement of corl-vl's grader with math-verify's own regression suite (huggingface/Math-Verify ``tests/``).

Every ``@pytest.mark.parametrize("gold,pred,expected", [...])`` case of the suite's test files is read with
``ast`` (only literal strings and numbers; nothing is executed), then graded as ``corl-vl grade`` does:
the gold's last box is its answer (a gold may be a whole solution), else the whole gold; the prediction is
graded in lenient mode, and the verdict is compared with ``expected``. Cases whose test passes extra
configuration (a fourth parameter such as ``allow_set_relation_comp``, or non-literal values) are left out
and counted. Prints agreement, false accepts and false rejects; ``--json`` writes every disagreement.

    python benchmarks/grading/mathverify_suite.py --tests DIR [--json results/mathverify_suite.json]

``DIR`` is the suite's ``tests/`` folder (a checkout of huggingface/Math-Verify).
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from pathlib import Path


def _names(node: ast.expr) -> list[str] | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [n.strip() for n in node.value.split(",")]
    if isinstance(node, ast.List | ast.Tuple) and all(isinstance(e, ast.Constant) for e in node.elts):
        return [str(e.value) for e in node.elts]  # type: ignore[attr-defined]
    return None


def read_cases(path: Path) -> tuple[list[dict], int]:
    """(cases, skipped) from one test file: each case {"file", "test", "gold", "pred", "expected"}."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    cases, skipped = [], 0
    for fn in ast.walk(tree):
        if not isinstance(fn, ast.FunctionDef):
            continue
        for deco in fn.decorator_list:
            if not (isinstance(deco, ast.Call) and getattr(deco.func, "attr", "") == "parametrize"):
                continue
            names = _names(deco.args[0]) if deco.args else None
            if not names or names[:3] != ["gold", "pred", "expected"] or len(deco.args) < 2:
                continue
            rows = deco.args[1]
            if not isinstance(rows, ast.List | ast.Tuple):
                continue
            for row in rows.elts:
                try:
                    values = ast.literal_eval(row)
                except ValueError:
                    skipped += 1
                    continue
                if len(names) != 3 or len(values) != 3:
                    skipped += 1  # configuration tests (set relations, precision flags)
                    continue
                gold, pred, expected = values
                cases.append(
                    {
                        "file": path.name,
                        "test": fn.name,
                        "gold": gold,
                        "pred": pred,
                        "expected": bool(expected),
                    }
                )
    return cases, skipped


def grade_case(gold: str, pred: str) -> tuple[bool, str | None, str | None]:
    """(verdict, gold answer, extracted prediction) as corl-vl grades a (gold, response) pair."""
    from corl_vl.answers import extract_answer, grade

    gold_answer = extract_answer(gold, order=["boxed"]) or gold  # math-verify reads a gold as LaTeX
    graded = grade(pred, gold_answer)
    return graded.correct, gold_answer, graded.extracted


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tests", type=Path, required=True, help="the suite's tests/ folder")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    cases, skipped = [], 0
    for path in sorted(args.tests.glob("test_*.py")):
        found, left = read_cases(path)
        cases += found
        skipped += left
    wrong = []
    for case in cases:
        verdict, gold_answer, extracted = grade_case(case["gold"], case["pred"])
        if verdict != case["expected"]:
            wrong.append({**case, "ours": verdict, "gold_answer": gold_answer, "extracted": extracted})
    false_accepts = [w for w in wrong if w["ours"]]
    n = len(cases)
    summary = {
        "cases": n,
        "skipped": skipped,
        "agreement": (n - len(wrong)) / n if n else 1.0,
        "false_accepts": len(false_accepts),
        "false_rejects": len(wrong) - len(false_accepts),
    }
    print(json.dumps(summary))
    for w in wrong:
        kind = "FALSE ACCEPT" if w["ours"] else "false reject"
        print(
            f"{kind} [{w['test']}] gold={w['gold_answer']!r:.60} pred={w['pred']!r:.80} → {w['extracted']!r:.60}"
        )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(
            json.dumps({**summary, "disagreements": wrong}, indent=1, ensure_ascii=False) + "\n"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
