"""Padding share of the gradient pass at ``vs_trl.py --shape paper``'s lengths: in-order micro-batches of
``grpo.micro_batch_size`` rows (before) against the length-built ones (``corl_vl.train.minibatches``), by
arithmetic on the rows' token counts (prompt with its picture tokens + drawn completion) — no model runs.

    python benchmarks/perf/padding_share.py [--draws 20] [--micro-batch 8]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from shapes import FAMILIES, draw_length, problems

from corl_vl.train import minibatches
from model_adapters.registry import create_adapter

RESULTS = Path(__file__).parent / "results" / "padding_share.json"
K = 8


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--draws", type=int, default=20, help="steps of drawn lengths averaged (default 20)")
    parser.add_argument("--micro-batch", type=int, default=8, help="grpo.micro_batch_size (default 8)")
    args = parser.parse_args(argv)
    rows_out = []
    for family in ("text", "vl"):
        options = {"image_options": {"max_pixels": 1024 * 1024}} if family == "vl" else {}
        adapter = create_adapter(FAMILIES[family], **options)
        prompts = [len(adapter.encode_prompt(p)) for p in problems(family, 8, "paper")]
        for n_problems in (1, 4, 8):
            shares = {"in_order": [], "by_length": [], "forwards_in_order": [], "forwards_by_length": []}
            computed = []
            for call in range(args.draws):
                lengths = [prompts[r // K] + draw_length(call, r) for r in range(n_problems * K)]
                rows = list(range(len(lengths)))
                size = args.micro_batch
                before = [rows[s : s + size] for s in range(0, len(rows), size)]
                after = minibatches.length_micro_batches(lengths, rows, size)
                (p0, c0), (p1, c1) = (minibatches.padding_tokens(lengths, mb) for mb in (before, after))
                shares["in_order"].append(p0 / c0)
                shares["by_length"].append(p1 / c1)
                shares["forwards_in_order"].append(len(before))
                shares["forwards_by_length"].append(len(after))
                computed.append(c1 / c0)
            row = {"family": family, "problems": n_problems, "k": K, "micro_batch": args.micro_batch}
            row.update({key: statistics.mean(values) for key, values in shares.items()})
            row["tokens_computed_after_over_before"] = statistics.mean(computed)
            rows_out.append(row)
            print(
                f"| {family} | {n_problems} × {K} | {100 * row['in_order']:.1f} % | {100 * row['by_length']:.1f} % "
                f"| {row['forwards_in_order']:.1f} → {row['forwards_by_length']:.1f} "
                f"| {row['tokens_computed_after_over_before']:.2f} |"
            )
    command = "python benchmarks/perf/padding_share.py " + " ".join(sys.argv[1:] if argv is None else argv)
    RESULTS.write_text(json.dumps({"command": command.strip(), "rows": rows_out}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
