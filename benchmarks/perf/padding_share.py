"""Padding share of the gradient pass at ``vs_trl.py --shape paper``'s lengths: in-order micro-batches of
``grpo.micro_batch_size`` rows (before) against the length-built ones (``corl_vl.train.minibatches``), by
arithmetic on the rows' token counts (prompt with its picture tokens + drawn completion) — no model runs.

Two length-built orders: ``by_length`` (rows of all problems sorted together: the text families') and
``by_problem`` (a problem's rows kept together: what an adapter that shares a problem's vision pass gets), with
the pictures each would encode (one per distinct problem per forward).

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


ORDERS = ("in_order", "by_length", "by_problem")  # by_problem: the order a vision-sharing adapter gets


def micro_batches(order: str, lengths: list[int], groups: list[int], size: int) -> list[list[int]]:
    rows = list(range(len(lengths)))
    if order == "in_order":
        return [rows[s : s + size] for s in range(0, len(rows), size)]
    return minibatches.length_micro_batches(lengths, rows, size, groups if order == "by_problem" else None)


def measure(prompts: list[int], n_problems: int, draws: int, size: int) -> dict[str, float]:
    """Mean over ``draws`` steps, per order: padding share, forwards, pictures encoded (one per distinct
    problem per forward, as the sharing adapters do) and tokens computed relative to the in-order forwards."""
    out: dict[str, list[float]] = {}
    for call in range(draws):
        lengths = [prompts[r // K] + draw_length(call, r) for r in range(n_problems * K)]
        groups = [r // K for r in range(len(lengths))]
        before = None
        for order in ORDERS:
            micro = micro_batches(order, lengths, groups, size)
            padded, computed = minibatches.padding_tokens(lengths, micro)
            before = before or computed
            for key, value in (
                ("padding", padded / computed),
                ("forwards", len(micro)),
                ("pictures", minibatches.pictures_encoded(groups, micro)),
                ("tokens_vs_in_order", computed / before),
            ):
                out.setdefault(f"{key}_{order}", []).append(value)
    return {key: statistics.mean(values) for key, values in out.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--draws", type=int, default=20, help="steps of drawn lengths averaged (default 20)")
    parser.add_argument("--micro-batch", type=int, default=8, help="grpo.micro_batch_size (default 8)")
    args = parser.parse_args(argv)
    rows_out = []
    print("| family | rows | order | padding | forwards | pictures encoded | tokens computed ÷ in order |")
    print("|---|---|---|---|---|---|---|")
    for family in ("text", "vl"):
        options = {"image_options": {"max_pixels": 1024 * 1024}} if family == "vl" else {}
        adapter = create_adapter(FAMILIES[family], **options)
        prompts = [len(adapter.encode_prompt(p)) for p in problems(family, 8, "paper")]
        for n_problems in (1, 2, 4, 8):
            row = {"family": family, "problems": n_problems, "k": K, "micro_batch": args.micro_batch}
            row.update(measure(prompts, n_problems, args.draws, args.micro_batch))
            rows_out.append(row)
            for order in ORDERS if family == "vl" else ORDERS[:2]:  # text: no picture, by length only
                pictures = f"{row[f'pictures_{order}']:.1f}" if family == "vl" else "–"
                print(
                    f"| {family} | {n_problems} × {K} | {order} | {100 * row[f'padding_{order}']:.1f} % "
                    f"| {row[f'forwards_{order}']:.2f} | {pictures} | {row[f'tokens_vs_in_order_{order}']:.2f} |"
                )
    command = "python benchmarks/perf/padding_share.py " + " ".join(sys.argv[1:] if argv is None else argv)
    RESULTS.write_text(json.dumps({"command": command.strip(), "rows": rows_out}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
