"""Smoke sweep: every training option and every subcommand flag, one tiny run each, into one table.

    PYTHONPATH=. python benchmarks/smoke/options.py --workers 2            # everything (tens of minutes)
    PYTHONPATH=. python benchmarks/smoke/options.py --only 'grpo.*' --update  # re-run some, keep the rest
    PYTHONPATH=. python benchmarks/smoke/options.py --list                  # the cases, nothing run

The options are enumerated (sweep_catalog.py: config dataclasses and registries; sweep_cli.py: the argparse
parsers); training options run in-process on the demo cohort (warm-started tiny bases, 1 step), flags as
``corl-vl`` subprocesses. Results: results/options.json and results/options.md (benchmarks/smoke/README.md).
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import sweep_catalog as catalog
import sweep_cli
from sweep_runs import ROOT, run_command, run_pool, train_in_process, trained_from_folder, verdict

RESULTS = Path(__file__).parent / "results"
# run last, minutes each: a new warm-started base (other presets, warm-start settings), vLLM start-up, the demo
SLOW = (
    'agents.0.model="tiny',
    "experiment.warm_start",
    "experiment.agents",
    '="vllm"',
    "engine=vllm",
    " vllm",
    "corl-vl demo",
    "torchrun",
)


def config_cases() -> list[dict[str, Any]]:
    cases = []
    for option in catalog.config_options():
        if option.skip:
            cases.append({"id": option.key, "option": option.key, "value": "", "skip": option.skip})
        for value in option.values:
            shown = catalog.format_value(value.value)
            extra = f" (with {' '.join(value.also)})" if value.also else ""
            extra += f" [torchrun, {value.procs} processes]" if value.procs > 1 else ""
            skip = catalog.skip_reason(option.key, value.value)
            cases.append(
                {
                    "id": f"{option.key}={shown}{extra}",
                    "option": option.key,
                    "value": shown + extra,
                    "why": value.why,
                    "kind": "config",
                    "key": option.key,
                    "also": list(value.also),
                    "raw": value.value,
                    "procs": value.procs,
                    "skip": skip,
                }
            )
    return cases


def cli_cases() -> list[dict[str, Any]]:
    cases = []
    for flag in sweep_cli.cli_flags():
        option = f"corl-vl {flag.key.strip()}"
        if flag.skip:
            cases.append({"id": option, "option": option, "value": "", "skip": flag.skip})
        for value in flag.values:
            argv = sweep_cli.argv_for(flag, value)
            shown = " ".join(value.tokens)
            case_id = f"{option} {shown}".strip() + (f" ({' '.join(value.also)})" if value.also else "")
            if value.base:
                case_id += f" [base: {' '.join(value.base[:2])}]"
            cases.append(
                {
                    "id": case_id,
                    "option": option,
                    "value": shown or "(given)",
                    "why": value.why,
                    "kind": "cli",
                    "argv": argv,
                    "copy_run": value.copy_run,
                    "trains": argv[0] in ("train", "demo"),
                    "skip": "",
                }
            )
    return cases


def all_cases() -> list[dict[str, Any]]:
    cases = config_cases() + cli_cases()
    seen: dict[str, int] = {}
    for case in cases:  # ids are the table's keys: the same value twice gets a suffix
        seen[case["id"]] = seen.get(case["id"], 0) + 1
        if seen[case["id"]] > 1:
            case["id"] += f" #{seen[case['id']]}"
    return sorted(cases, key=lambda c: any(mark in c["id"] for mark in SLOW))


def prepare_work(work: Path) -> dict[str, str]:
    """Files the runs share: the documented reward plugin, response/gold files, tiny checkpoints, one trained
    demo run (for plot, eval --model RUN, resume)."""
    from corl_vl.eval.loaders import load_benchmark
    from model_adapters.presets import all_presets
    from model_adapters.tiny import ensure_tiny

    work.mkdir(parents=True, exist_ok=True)
    doc = (ROOT / "docs" / "training.md").read_text()
    plugin = re.search(r"```python\n(# my_rewards\.py.*?)```", doc, re.S)
    (work / "my_rewards.py").write_text(plugin.group(1) if plugin else "")
    pids = list(json.loads((ROOT / "tests/fixtures/eval/mathvista/testmini.json").read_text()))
    lines = [json.dumps({"id": pid, "response": "\\boxed{1}"}) for pid in pids]
    (work / "responses.jsonl").write_text("\n".join(lines) + "\n")
    for name, fixture in sweep_cli.FIXTURES.items():  # one response per record of each benchmark fixture
        records = load_benchmark(name, ROOT / "tests/fixtures/eval" / fixture, annotations_only=True)
        lines = [json.dumps({"id": str(r.id), "response": "\\boxed{1}"}) for r in records]
        (work / f"responses_{name}.jsonl").write_text("\n".join(lines) + "\n")
    for name, said in (("a", "1"), ("b", "2")):  # two models' responses to graded problems, for --gold
        lines = [json.dumps({"id": f"g{i}", "response": f"\\boxed{{{said}}}"}) for i in range(4)]
        (work / f"answers_{name}.jsonl").write_text("\n".join(lines) + "\n")
    gold = [json.dumps({"id": f"g{i}", "answer": str(1 + i % 2)}) for i in range(4)]
    (work / "gold.jsonl").write_text("\n".join(gold) + "\n")
    paths = {"work": str(work), "fx": str(ROOT / "tests" / "fixtures"), "run": str(work / "run")}
    paths["ckpt"] = str(ensure_tiny("tiny-qwen2.5-vl"))
    paths["text"] = str(ensure_tiny("tiny-qwen2.5"))
    paths["ckpt2"] = str(ensure_tiny("tiny-internvl3.5"))
    for preset in all_presets().values():  # the first tiny preset of each family
        if preset.tiny and f"tiny:{preset.adapter}" not in paths:
            paths[f"tiny:{preset.adapter}"] = str(ensure_tiny(preset.name))
    if not (work / "run" / "checkpoints" / "latest").exists():
        shutil.rmtree(work / "run", ignore_errors=True)
        record = train_in_process([*catalog.TINY, f"train.output_dir={work / 'run'}"])
        if record["rc"]:
            raise SystemExit(f"the shared demo run failed: {record['error']}")
    return paths


def _fill(text: str, paths: dict[str, str]) -> str:
    for name, value in paths.items():
        text = text.replace("{" + name + "}", value)
    return text


def execute(case: dict[str, Any], paths: dict[str, str], scratch: str) -> dict[str, Any]:
    """One case (in a worker process): its record, with the table's status."""
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", case["id"])[:100] + f"-{abs(hash(case['id'])) % 10**6}"
    tmp = Path(scratch) / slug
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    paths = {**paths, "tmp": str(tmp), "out": str(tmp / "run")}
    value = catalog.Value(case.get("raw"), tuple(case.get("also", ())), procs=case.get("procs", 1))
    if case["kind"] == "config" and value.procs == 1 and not catalog.uses_vllm(case["key"], value):
        sets = catalog.overrides(case["key"], value, **paths)
        if case["key"] != "train.output_dir":
            sets.append(f"train.output_dir={tmp / 'run'}")
        record = train_in_process(sets)
        trains = True
    else:
        if case["kind"] == "config":  # the same run through `corl-vl train` in a subprocess
            sets = catalog.overrides(case["key"], value, **paths)
            launcher = (
                ["torchrun", f"--nproc_per_node={value.procs}", "-m", "corl_vl"] if value.procs > 1 else []
            )
            case = {
                **case,
                "argv": [
                    *launcher,
                    "train",
                    "--config",
                    "configs/demo.yaml",
                    "--output-dir",
                    "{tmp}/run",
                    "--no-progress",
                    *(t for s in sets for t in ("--set", s)),
                ],
                "trains": True,
            }
        if case.get("copy_run"):
            shutil.copytree(paths["run"], tmp / "run", symlinks=True)  # checkpoints/latest stays a link
        argv = [_fill(token, paths) for token in case["argv"]]
        record = run_command(argv)
        record["command"] = "corl-vl " + " ".join(argv).replace(str(ROOT) + "/", "").replace(scratch, "$TMP")
        trains = case["trains"]
        if trains and record["rc"] == 0:
            out = Path(argv[argv.index("--output-dir") + 1]) if "--output-dir" in argv else tmp / "run"
            record.update(trained_from_folder(out, _bases(out)))
    record["status"] = verdict(record, trains)
    shutil.rmtree(tmp, ignore_errors=True)
    return record


def _bases(run_dir: Path) -> dict[str, Path]:
    """Each agent's starting weights, from the run's config.yaml (the warm-started base it trained from)."""
    import yaml

    config = run_dir / "config.yaml"
    if not config.exists():
        return {}
    agents = (yaml.safe_load(config.read_text()) or {}).get("agents") or []
    return {a["name"]: Path(a["model"]) for a in agents if Path(str(a.get("model"))).is_dir()}


def write_results(
    rows: dict[str, dict[str, Any]], cases: list[dict[str, Any]], mine: set[str] | None = None
) -> None:
    """Both files, in the cases' order; rows of cases this invocation did not run are re-read from the file
    first, so two invocations with --update on disjoint cases can share it."""
    from corl_vl.io import write_text_atomic

    RESULTS.mkdir(parents=True, exist_ok=True)
    if mine is not None and (RESULTS / "options.json").exists():
        stored = {r["id"]: r for r in json.loads((RESULTS / "options.json").read_text())}
        rows = {
            **{k: v for k, v in stored.items() if v["status"] != "not run"},
            **{k: rows[k] for k in mine if k in rows},
        }
    ordered = [
        {**c, **rows.get(c["id"], {"status": "not run", "reason": c.get("skip") or "not run yet"})}
        for c in cases
    ]
    for row in ordered:
        for key in ("raw", "argv", "also", "kind", "key", "copy_run", "trains", "procs"):
            row.pop(key, None)
    write_text_atomic(RESULTS / "options.json", _portable(json.dumps(ordered, indent=1, default=str) + "\n"))
    write_text_atomic(RESULTS / "options.md", _portable(render(ordered)))


LOCAL: list[tuple[str, str]] = []  # (this machine's path, its name in the results), set by main


def _portable(text: str) -> str:
    """The results name the checkout, the cache and the work folder, not where they were on this machine."""
    for path, name in LOCAL:
        text = text.replace(path, name)
    return text


def render(rows: list[dict[str, Any]]) -> str:
    counts: dict[str, int] = {}
    for row in rows:
        word = row["status"].split(":")[0]
        counts[word] = counts.get(word, 0) + 1
    lines = [
        "# Smoke sweep: every training option and subcommand flag",
        "",
        "Written by `benchmarks/smoke/options.py` (how to read it: benchmarks/smoke/README.md).",
        "",
        "Totals: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) + f" (of {len(rows)})",
        "",
        "| option | value | status | rc | s | trained rows | weights changed | first error or warning line |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        rows_ = row.get("rows") or {}
        changed = row.get("changed") or {}
        note = row.get("error") or "; ".join(row.get("warnings") or []) or row.get("reason", "")
        cells = [
            row["option"],
            row.get("value", ""),
            row["status"],
            str(row.get("rc", "")),
            str(row.get("seconds", "")),
            " ".join(f"{n}:{int(v)}" for n, v in rows_.items()),
            " ".join(f"{n}:{_moved(v, (row.get('tied') or {}).get(n))}" for n, v in changed.items()),
            note[:200],
        ]
        lines.append("| " + " | ".join(c.replace("|", "\\|").replace("\n", " ") for c in cells) + " |")
    return "\n".join(lines) + "\n"


def _moved(changed: bool, tied: bool | None) -> str:
    return "yes" if changed else "no (no gradient: groups tied, KL 0)" if tied else "NO"


def _matches(case_id: str, pattern: str) -> bool:
    return fnmatch.fnmatch(case_id, pattern) or pattern in case_id


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="PATTERN",
        help="run only cases whose id matches this glob (or contains it); repeatable",
    )
    parser.add_argument(
        "--exclude",
        action="append",
        default=[],
        metavar="PATTERN",
        help="leave out matching cases; repeatable",
    )
    parser.add_argument("--update", action="store_true", help="merge into the existing results/options.json")
    parser.add_argument(
        "--missing", action="store_true", help="with --update: only the chosen cases that have no result yet"
    )
    parser.add_argument("--workers", type=int, default=1, help="processes running cases at once")
    parser.add_argument(
        "--work", type=Path, help="shared files and the demo run (default: a temporary folder)"
    )
    parser.add_argument("--list", action="store_true", help="print the cases and exit")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # no hub here: hub ids must be refused, not hang
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    os.chdir(ROOT)
    cases = all_cases()
    chosen = [
        c
        for c in cases
        if (not args.only or any(_matches(c["id"], p) for p in args.only))
        and not any(_matches(c["id"], p) for p in args.exclude)
    ]
    if args.list:
        for case in chosen:
            print(case["id"], "—", case.get("skip") or " ".join(case.get("argv", [])) or case.get("why", ""))
        print(f"{len(chosen)} of {len(cases)} cases", file=sys.stderr)
        return 0
    rows: dict[str, dict[str, Any]] = {}
    if args.update and (RESULTS / "options.json").exists():
        rows = {
            r["id"]: r for r in json.loads((RESULTS / "options.json").read_text()) if r["status"] != "not run"
        }
    if args.missing:
        chosen = [c for c in chosen if c["id"] not in rows]
    work = args.work or Path(tempfile.mkdtemp(prefix="corl-smoke-"))
    from corl_vl.paths import cache_dir

    LOCAL[:] = [(str(work.resolve()), "$WORK"), (str(cache_dir()), "$CORL_VL_CACHE"), (f"{ROOT}/", "")]
    paths = prepare_work(work)
    runnable = [c for c in chosen if not c["skip"]]
    for case in chosen:
        rows.pop(case["id"], None)
        if case["skip"]:
            rows[case["id"]] = {"status": "not run", "reason": case["skip"]}
    mine = {c["id"] for c in chosen} if args.update else None

    def done(case: dict[str, Any], row: dict[str, Any], seconds: float) -> None:
        rows[case["id"]] = row
        print(f"[{seconds:6.0f}s] {row['status']:<32} {case['id']}", flush=True)
        write_results(rows, cases, mine)

    run_pool(runnable, execute, (paths, str(work / "runs")), args.workers, done)
    write_results(rows, cases, mine)
    failed = [r for r in rows.values() if r["status"].startswith("FAIL")]
    print(f"{len(runnable)} run, {len(failed)} failed; results in {RESULTS}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
