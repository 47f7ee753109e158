"""Evaluation I/O: reading response files, writing results.json / responses.jsonl, report.md and a bar chart.

Every file is written to a temporary name and renamed, so an interrupted run never leaves a half-written
results file that looks complete. Response files are keyed by record id (never by position): lines carry
``id`` and ``response`` (one string) or ``responses`` (a list); several lines for one id accumulate.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from corl_vl.answers.clean import encodable
from corl_vl.errors import CorlError
from corl_vl.eval.protocol import protocol_markdown
from corl_vl.eval.scoring.base import RecordScore
from corl_vl.io import atomic_file, read_jsonl, write_jsonl_atomic, write_text_atomic

# Metrics shown next to the headline number in report.md, per benchmark.
_REPORT_METRICS = {
    "wemath": ("score_strict", "score_loose", "IK", "IG", "CM_strict", "RM_strict", "S1", "S2", "S3")
}


# ---------------------------------------------------------------------------------------------- writing
def write_run(folder: Path, results: Mapping[str, Any], records: Mapping[str, RecordScore]) -> None:
    """``results.json`` and ``responses.jsonl`` (response, extracted, correct per record) in ``folder``.

    Text that UTF-8 cannot encode (lone surrogates in a response) is written as U+FFFD, never dropped;
    ``results.json`` counts the replacements in ``n_replaced_characters``."""
    rows, replaced = [], 0
    for record in records.values():
        row, n = encodable(record.to_json())
        rows.append(row)
        replaced += n
    out = {**results, "n_replaced_characters": replaced}
    write_text_atomic(folder / "results.json", json.dumps(out, indent=2, ensure_ascii=False) + "\n")
    write_jsonl_atomic(folder / "responses.jsonl", rows)


# ---------------------------------------------------------------------------------------------- reading
def read_responses(path: str | Path, *, allow_multiple: bool = False) -> dict[str, list[str]]:
    """Responses keyed by record id from a JSONL file (``id`` + ``response`` or ``responses`` per line).

    An id on two lines is refused unless ``allow_multiple`` (then they are scored together, avg@k): a file
    concatenated twice or two runs merged by mistake would otherwise be averaged silently.
    """
    path = Path(path).expanduser()
    out: dict[str, list[str]] = {}
    first_line: dict[str, int] = {}
    for lineno, row in read_jsonl(path, what="responses file"):
        where = f"{path}:{lineno}"
        if row.get("id") is None:
            raise CorlError(f"{where}: missing field 'id'")
        rid = str(row["id"])
        if rid in first_line and not allow_multiple:
            raise CorlError(
                f"{where}: id '{rid}' already appeared on line {first_line[rid]}; pass --allow-multiple to score "
                f"several responses per id (avg@k), or remove the duplicate"
            )
        first_line.setdefault(rid, lineno)
        if "response" in row:
            found = [row["response"]]
        elif "responses" in row and isinstance(row["responses"], list):
            found = row["responses"]
        else:
            raise CorlError(f"{where}: missing field 'response' (or a 'responses' list)")
        if not all(isinstance(r, str) for r in found):
            raise CorlError(f"{where}: field 'response' must be a string")
        out.setdefault(str(row["id"]), []).extend(found)
    return out


def check_ids(responses: Mapping[str, Sequence[str]], ids: Iterable[str], source: str) -> list[str]:
    """Response ids that are not benchmark records (returned for reporting); none matching is an error."""
    known = set(ids)
    unknown = [i for i in responses if i not in known]
    if responses and len(unknown) == len(responses):
        raise CorlError(
            f"{source}: none of its {len(responses)} ids is a record of this benchmark "
            f"(e.g. '{unknown[0]}'); wrong --benchmark or --data?"
        )
    return unknown


# ---------------------------------------------------------------------------------------------- report
def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}"


def overall_text(results: Mapping[str, Any]) -> str:
    """The headline for a console line: "12.34%", or why there is none (We-Math without a complete group)."""
    overall = results.get("overall")
    if overall is None:
        return "n/a (no complete group)" if results.get("benchmark") == "wemath" else "n/a"
    return f"{100 * overall:.2f}%"


def render_markdown(table: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> str:
    """report.md: overall accuracy (%) per run × benchmark, then each benchmark's main metrics."""
    runs = list(table)
    benchmarks = list(dict.fromkeys(b for run in table.values() for b in run))
    runs = [run for run in runs if table[run]]
    lines = [
        "# Evaluation report",
        "",
        "Overall (%; We-Math: strict score), by each run's --scoring (default: the benchmark's official rules). "
        "Records without a response count as wrong.",
        "",
        "**Which number to quote:** `overall` (this table, `results.json` `overall`) under official scoring "
        "is the comparable score: it applies each benchmark's published rules, quirks included, so it stands "
        "next to published tables. `overall_verified` (below) is what the model got right by lenient "
        "extraction and mathematical equivalence; quote it only as such, never in a table of official scores.",
        "",
    ]
    lines.append("| run | " + " | ".join(benchmarks) + " |")
    lines.append("|---|" + "---:|" * len(benchmarks))
    for run in runs:
        cells = [_pct(table[run][b]["overall"]) if b in table[run] else "–" for b in benchmarks]
        lines.append(f"| {run} | " + " | ".join(cells) + " |")
    lines += _scoring_table(table, runs, benchmarks)
    lines += _protocol_section(table, runs)
    for bench in benchmarks:
        keys = _REPORT_METRICS.get(bench, ("accuracy",))
        lines += ["", f"## {bench}", "", "| run | records | missing | " + " | ".join(keys) + " |"]
        lines.append("|---|---:|---:|" + "---:|" * len(keys))
        for run in runs:
            res = table[run].get(bench)
            if res is None:
                continue
            cells = [_pct(res["metrics"].get(k)) for k in keys]
            lines.append(f"| {run} | {res['n_records']} | {res['n_missing']} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _protocol_section(table: Mapping[str, Mapping[str, Mapping[str, Any]]], runs: Sequence[str]) -> list[str]:
    """The protocol the results were generated under (``--protocol``), its settings and splits; none without."""
    found = [res for run in runs for res in table[run].values() if res.get("protocol")]
    if not found:
        return []
    splits = {res["benchmark"]: res["split"] for res in found if res.get("split")}
    grader = (
        f"Under this protocol `overall` is its grader's ({found[0]['scoring']} scoring, {found[0]['extraction']} "
        "extraction); `overall_official` applies each benchmark's own published rules and stands next to the "
        "benchmarks' published tables."
    )
    return [*protocol_markdown(found[0]["protocol"], splits), "", grader]


def _scoring_table(
    table: Mapping[str, Mapping[str, Mapping[str, Any]]], runs: list[str], benchmarks: list[str]
) -> list[str]:
    """Both scorings side by side, and on how many records their verdicts disagree (docs/grading.md)."""
    rows = [
        f"| {run} | {bench} | {_pct(res.get('overall_official'))} | {_pct(res.get('overall_verified'))} "
        f"| {res.get('n_disagree', 0)} |"
        for run in runs
        for bench in benchmarks
        if (res := table[run].get(bench)) is not None and "overall_official" in res
    ]
    if not rows:
        return []
    head = [
        "",
        "## Official vs verified scoring",
        "",
        "Official (`overall_official`): each benchmark's published rules (comparable with published tables). "
        "Verified (`overall_verified`): lenient extraction + mathematical equivalence. Disagree: records whose "
        "two verdicts differ.",
        "",
        "| run | benchmark | official | verified | disagree |",
        "|---|---|---:|---:|---:|",
    ]
    return head + rows + _disagreement_table(table, runs, benchmarks)


def _disagreement_table(
    table: Mapping[str, Mapping[str, Mapping[str, Any]]], runs: list[str], benchmarks: list[str]
) -> list[str]:
    """The disagreements by category (which scoring accepts, and whether the extractions differ)."""
    rows = [
        f"| {run} | {bench} | {category} | {count} |"
        for run in runs
        for bench in benchmarks
        if (res := table[run].get(bench)) is not None
        for category, count in (res.get("disagree_categories") or {}).items()
    ]
    if not rows:
        return []
    head = [
        "",
        "Disagreements by category:",
        "",
        "| run | benchmark | category | records |",
        "|---|---|---|---:|",
    ]
    return head + rows


def plot_bars(table: Mapping[str, Mapping[str, Mapping[str, Any]]], path: Path) -> None:
    """Grouped bar chart of the overall numbers: benchmarks on the x axis, one bar per run."""
    # lazy: matplotlib
    import matplotlib

    matplotlib.use("Agg")
    # lazy: matplotlib
    import matplotlib.pyplot as plt

    runs = [run for run in table if table[run]]
    benchmarks = list(dict.fromkeys(b for run in table.values() for b in run))
    width = 0.8 / max(1, len(runs))
    fig, ax = plt.subplots(figsize=(max(4.0, 1.2 * len(benchmarks) * max(1, len(runs)) ** 0.5 + 2), 3.6))
    for i, run in enumerate(runs):
        xs = [j + (i - (len(runs) - 1) / 2) * width for j in range(len(benchmarks))]
        ys = [100 * (table[run][b]["overall"] or 0.0) if b in table[run] else 0.0 for b in benchmarks]
        bars = ax.bar(xs, ys, width=width, label=run)
        ax.bar_label(bars, fmt="%.1f", fontsize=7)
    ax.set_xticks(range(len(benchmarks)), benchmarks)
    ax.set_ylabel("overall (%)")
    ax.set_ylim(0, 105)
    if len(runs) > 1:
        ax.legend(fontsize=8)
    else:
        ax.set_title(runs[0], fontsize=9)
    fig.tight_layout()
    try:
        with atomic_file(path) as tmp:
            fig.savefig(tmp, dpi=120)
    finally:
        plt.close(fig)


def write_outputs(
    output_dir: Path, runs: Mapping[str, Mapping[str, tuple[Mapping[str, Any], Mapping[str, RecordScore]]]]
) -> dict[str, Path]:
    """Write every run's files plus report.md and report.png; returns where each results.json went.

    One run on one benchmark writes ``results.json`` and ``responses.jsonl`` straight into ``output_dir``;
    otherwise each goes to ``output_dir/<run>/<benchmark>/``.
    """
    pairs = [(run, bench) for run, by_bench in runs.items() for bench in by_bench]
    if not pairs:  # checked before writing: a report without a single score is no report
        raise CorlError(
            f"{output_dir}: nothing to report, every requested benchmark was skipped for every model "
            f"(see the warnings above); pick a benchmark the model can read"
        )
    written: dict[str, Path] = {}
    for run, bench in pairs:
        folder = output_dir if len(pairs) == 1 else output_dir / run / bench
        results, records = runs[run][bench]
        write_run(folder, results, records)
        written[f"{run}/{bench}"] = folder / "results.json"
    table = {run: {bench: res for bench, (res, _) in by_bench.items()} for run, by_bench in runs.items()}
    write_text_atomic(output_dir / "report.md", render_markdown(table))
    plot_bars(table, output_dir / "report.png")
    return written
