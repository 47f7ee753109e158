"""Combination sweep: a pairwise covering array over the options that interact, one tiny run per row, checking
that what each option claims took effect. Results: results/combos.json and results/combos.md.

    PYTHONPATH=. python benchmarks/smoke/combos.py --workers 1            # every row (about an hour here)
    PYTHONPATH=. python benchmarks/smoke/combos.py --only 'launch=single' --update   # some rows, keep the rest
    PYTHONPATH=. python benchmarks/smoke/combos.py --list                 # the rows, nothing run

The plan (factors, constraints, the greedy covering array) is combos_plan.py; the checks combos_checks.py.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import combos_checks as checks
import combos_plan as plan
from options import _bases
from sweep_runs import (
    ROOT,
    _Warnings,
    model_loads,
    no_gradient,
    run_command,
    run_pool,
    trained_from_folder,
    verdict,
)

RESULTS = Path(__file__).parent / "results"
NAME = "combos"


def cases() -> list[dict[str, Any]]:
    rows = []
    for case_id, sets, expect in plan.TARGETED[:2]:  # refusals first: seconds each
        rows.append(
            {"id": case_id, "row": {"launch": "single"}, "sets": [*plan.BASE, *sets], "expect": expect}
        )
    rows += [
        {"id": plan.row_id(i + 1, row), "row": row, "sets": plan.overrides(row), "expect": "trains"}
        for i, row in enumerate(plan.covering_array())
    ]
    for case_id, sets, expect in plan.TARGETED[2:]:
        rows.append(
            {"id": case_id, "row": {"launch": "zero1"}, "sets": [*plan.BASE, *sets], "expect": expect}
        )
    return rows


def run_in_process(row: dict[str, str], sets: list[str], out: Path) -> tuple[dict[str, Any], Any]:
    """``corl_vl.recipe.train`` with the row's settings: the record (as sweep_runs') plus the claims checked
    on the live models; never raises. Returns the final weights too (for the offload pair)."""
    import logging
    import traceback

    from corl_vl.errors import CorlError
    from corl_vl.experiment import demo_config
    from corl_vl.recipe import train

    warnings = _Warnings()
    logger = logging.getLogger("corl_vl")
    logger.addHandler(warnings)
    before: dict[str, dict[str, Any]] = {}
    record: dict[str, Any] = {"rc": 0, "error": "", "claims": []}
    final: dict[str, dict[str, Any]] = {}
    start = time.perf_counter()
    loads: list[str] = []
    try:
        cfg = demo_config([*sets, f"train.output_dir={out}"])
        with model_loads() as loads:
            run = train(
                cfg,
                progress=False,
                prepare=lambda c: before.update({a.name: checks.snapshot(a.model) for a in c.agents}),
            )
        record["rows"] = {n: sum(r.get("trained_rows", 0.0) for r in h) for n, h in run.history.items()}
        record["tied"] = {n: no_gradient(h) for n, h in run.history.items()}
        record["changed"] = {
            a.name: any(
                not v.equal(before[a.name][n])
                for n, v in checks.snapshot(a.model).items()
                if n in before[a.name]
            )
            for a in run.cohort.agents
        }
        record["claims"] = checks.in_process_claims(row, run.cohort, before)
        final = {a.name: checks.snapshot(a.model) for a in run.cohort.agents}
    except CorlError as err:
        record.update(rc=2, error=str(err).splitlines()[0])
    except Exception as err:
        last = traceback.format_exception_only(type(err), err)[-1].strip()
        record.update(rc=1, error=last.splitlines()[0], traceback=True)
    finally:
        logger.removeHandler(warnings)
    # decided from the config: no model loaded and no run folder written
    written = (out / "config.yaml").exists()
    record["stage"] = "after models load" if before or loads or written else "before models load"
    record["seconds"] = round(time.perf_counter() - start, 1)
    record["warnings"] = warnings.lines[:3]
    return record, final


def _train_argv(row: dict[str, str], sets: list[str], out: Path, *more: str) -> list[str]:
    launch = row.get("launch", "single")
    launcher = ["torchrun", "--nproc_per_node=2", "-m", "corl_vl"] if launch != "single" else []
    if launch != "single":
        sets = [*sets, "distributed.deepspeed=configs/deepspeed/zero2.json", "distributed.backend=gloo"]
        sets += [f"distributed.zero_stage={launch[-1]}"] if launch == "zero3" else []
    argv = [*launcher, "train", "--config", "configs/demo.yaml", "--output-dir", str(out), "--no-progress"]
    return argv + [t for s in sets for t in ("--set", s)] + list(more)


def run_subprocess(row: dict[str, str], sets: list[str], out: Path) -> dict[str, Any]:
    """``corl-vl train`` (vLLM rows, torchrun rows); torchrun rows also run 1 step + ``--resume`` to step 2."""
    record = run_command(_train_argv(row, sets, out))
    record["command"] = "corl-vl " + " ".join(_train_argv(row, sets, Path("$RUN"))).replace(
        str(ROOT) + "/", ""
    )
    record["stage"] = "after models load" if (out / "config.yaml").exists() else "before models load"
    record["claims"] = []
    if record["rc"] != 0:
        return record
    steps = 2 if any(s == "train.max_steps=2" for s in sets) else 1
    record.update(trained_from_folder(out, _bases(out)))
    record["claims"] = checks.folder_claims(row, out, _bases(out)) + checks.run_dir_claims(row, out, steps)
    if row.get("launch", "single") != "single":
        gaps = resume_check(row, sets, out)
        record["claims"] += gaps
        record["resume"] = "; ".join(gaps) or "1 step + --resume equals 2 straight steps (no unsafe flag)"
    return record


def resume_check(row: dict[str, str], sets: list[str], straight: Path) -> list[str]:
    """The row again as 1 step (saving it) and ``--resume`` to step 2; the result must equal ``straight``
    (which must then have run 2 steps) and the resume must not need ``--allow-unsafe-checkpoint``."""
    two = [s for s in sets if not s.startswith(("train.max_steps=", "train.save_every="))]
    if "train.max_steps=2" not in sets:
        return ["(resume check needs the straight run at 2 steps)"]
    halves = straight.parent / "resumed"
    first = run_command(_train_argv(row, [*two, "train.max_steps=1", "train.save_every=1"], halves))
    if first["rc"]:
        return [f"1-step run: exit {first['rc']}: {first['error']}"]
    again = run_command(
        _train_argv(row, [*two, "train.max_steps=2", "train.save_every=1"], halves, "--resume")
    )
    if again["rc"]:
        return [f"resume: exit {again['rc']}: {again['error']}"]
    return checks.resume_claims(straight, halves)


def execute(case: dict[str, Any], scratch: str) -> dict[str, Any]:
    """One row (in a worker process): its record and status."""
    tmp = Path(scratch) / case["id"].split()[0]
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    row, sets = case["row"], list(case["sets"])
    if row.get("launch", "single") != "single" and "train.max_steps=2" not in sets:
        sets += ["train.max_steps=2", "train.save_every=1"]  # the straight half of the resume check
    steps = 2 if "train.max_steps=2" in sets else 1
    if row.get("launch", "single") == "single" and row.get("engine", "hf") == "hf":
        record, final = run_in_process(row, sets, tmp / "run")
        if record["rc"] == 0:
            record["claims"] += checks.run_dir_claims(row, tmp / "run", steps)
        if record["rc"] == 0 and row.get("offload") == "cpu":  # the same row without offload, same seed
            plain = [s for s in sets if s != "optimizer.offload=cpu"]
            other, weights = run_in_process(row, plain, tmp / "plain")
            for name, params in final.items():
                gap = (
                    checks.weights_close(params, weights.get(name, {})) if not other["rc"] else other["error"]
                )
                record["claims"] += [f"offload != no offload: {name} {gap}"] if gap else []
    else:
        record = run_subprocess(row, sets, tmp / "run")
    record["status"] = status(record, case["expect"])
    shutil.rmtree(tmp, ignore_errors=True)
    return record


def status(record: dict[str, Any], expect: str) -> str:
    """PASS, or FAIL with why. A refusal passes only where the row expects one: a one-line CorlError (exit 2,
    no traceback) before any model loaded (in-process: the model-ready hook never ran; subprocess: no
    config.yaml written)."""
    if expect == "refused":
        refused = record["rc"] == 2 and not record.get("traceback")
        if refused and record.get("stage") == "before models load":
            return "PASS (refused before models load)"
        return "FAIL: refused after models load" if refused else "FAIL: not refused"
    word = verdict(record, trains=True)
    if word != "ok":
        return word if word.startswith("FAIL") else f"FAIL: {word}"
    claims = record.get("claims") or []
    return f"FAIL: {claims[0]}" if claims else "PASS"


def write_results(rows: dict[str, dict[str, Any]], all_cases: list[dict[str, Any]]) -> None:
    from corl_vl.io import write_text_atomic

    RESULTS.mkdir(parents=True, exist_ok=True)
    ordered = [
        {"id": c["id"], "row": c["row"], "sets": c["sets"], **rows.get(c["id"], {"status": "not run"})}
        for c in all_cases
    ]
    write_text_atomic(RESULTS / f"{NAME}.json", _portable(json.dumps(ordered, indent=1, default=str) + "\n"))
    write_text_atomic(RESULTS / f"{NAME}.md", _portable(render(ordered)))


def _portable(text: str) -> str:
    """The results name the checkout and the cache, not where they were on this machine."""
    from corl_vl.paths import cache_dir

    return text.replace(f"{ROOT}/", "").replace(str(cache_dir()), "$CORL_VL_CACHE")


def render(rows: list[dict[str, Any]]) -> str:
    counts: dict[str, int] = {}
    for row in rows:
        word = row["status"].split(":")[0].split(" (")[0]
        counts[word] = counts.get(word, 0) + 1
    lines = [
        "# Combination sweep: pairwise covering array over the interacting options",
        "",
        "Written by `benchmarks/smoke/combos.py` (how to read it: benchmarks/smoke/README.md). Options at their",
        "default are not shown in a row's id. Made with `PYTHONPATH=$PWD OMP_NUM_THREADS=1 python",
        "benchmarks/smoke/combos.py --workers 1` (rows re-run with `--update --only ROW` keep the others).",
        "",
        "Totals: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) + f" (of {len(rows)})",
        "",
        "| row | status | rc | s | trained rows | weights changed | claims not met / first error or warning |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        changed = row.get("changed") or {}
        note = (
            "; ".join(row.get("claims") or [])
            or row.get("error")
            or row.get("resume")
            or "; ".join(row.get("warnings") or [])
        )
        cells = [
            row["id"],
            row["status"],
            str(row.get("rc", "")),
            str(row.get("seconds", "")),
            " ".join(f"{n}:{int(v)}" for n, v in (row.get("rows") or {}).items()),
            " ".join(
                f"{n}:{'yes' if v else 'tied' if (row.get('tied') or {}).get(n) else 'NO'}"
                for n, v in changed.items()
            ),
            note[:240],
        ]
        lines.append("| " + " | ".join(c.replace("|", "\\|").replace("\n", " ") for c in cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--only", action="append", default=[], metavar="PATTERN", help="rows whose id matches"
    )
    parser.add_argument("--exclude", action="append", default=[], metavar="PATTERN", help="leave rows out")
    parser.add_argument("--update", action="store_true", help="merge into the existing results/combos.json")
    parser.add_argument("--workers", type=int, default=1, help="processes running rows at once")
    parser.add_argument("--list", action="store_true", help="print the rows and exit")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    os.chdir(ROOT)
    every = cases()

    def matches(case_id: str, pattern: str) -> bool:
        return fnmatch.fnmatch(case_id, pattern) or pattern in case_id

    chosen = [
        c
        for c in every
        if (not args.only or any(matches(c["id"], p) for p in args.only))
        and not any(matches(c["id"], p) for p in args.exclude)
    ]
    if args.list:
        for case in chosen:
            print(case["id"], "—", " ".join(case["sets"][len(plan.BASE) :]))
        print(f"{len(chosen)} of {len(every)} rows; {len(plan.all_pairs())} pairs covered", file=sys.stderr)
        return 0
    rows: dict[str, dict[str, Any]] = {}
    if args.update and (RESULTS / f"{NAME}.json").exists():
        rows = {
            r["id"]: r for r in json.loads((RESULTS / f"{NAME}.json").read_text()) if r["status"] != "not run"
        }
    scratch = tempfile.mkdtemp(prefix="corl-combos-")

    def done(case: dict[str, Any], row: dict[str, Any], seconds: float) -> None:
        rows[case["id"]] = row
        print(f"[{seconds:6.0f}s] {row['status'][:60]:<60} {case['id']}", flush=True)
        write_results(rows, every)

    run_pool(chosen, execute, (scratch,), args.workers, done)
    shutil.rmtree(scratch, ignore_errors=True)
    failed = [r for r in rows.values() if r["status"].startswith("FAIL")]
    print(f"{len(chosen)} run, {len(failed)} failed; results in {RESULTS}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
