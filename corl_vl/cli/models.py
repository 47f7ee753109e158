"""``corl-vl models``: see which model presets exist and build the tiny ones.

``list`` shows every preset (real ones with their hub id, tiny ones built locally) so a user can pick names for a
cohort config; ``build-tiny`` writes a tiny real-architecture checkpoint anywhere, e.g. to inspect or ship it.
"""

from __future__ import annotations

import argparse
import json
import time


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "models", help="list model presets; build tiny real-architecture checkpoints"
    )
    sub = parser.add_subparsers(dest="models_command", metavar="ACTION")
    sub.required = True

    list_parser = sub.add_parser("list", help="list every preset (name, adapter, weights, description)")
    list_parser.add_argument("--json", action="store_true", help="print JSON rows instead of a table")
    list_parser.set_defaults(func=_list)

    build = sub.add_parser("build-tiny", help="write a tiny random checkpoint of a real architecture")
    build.add_argument("name", help="a tiny preset (see `corl-vl models list`)")
    build.add_argument("--out", required=True, help="output folder (created)")
    build.add_argument("--seed", type=int, default=0, help="weight seed (same seed → identical weights)")
    build.set_defaults(func=_build_tiny)


def _rows() -> list[dict[str, str]]:
    # lazy: PIL, numpy, tokenizers
    from model_adapters.presets import all_presets

    return [
        {
            "name": p.name,
            "adapter": p.adapter,
            "weights": p.hub_id
            or ("random, published config (no download)" if p.random else "tiny (built locally)"),
            "description": p.description,
        }
        for p in all_presets().values()
    ]


def _list(args: argparse.Namespace) -> int:
    rows = _rows()
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    # lazy: rich
    from rich.console import Console
    from rich.table import Table

    table = Table(title="corl-vl model presets")
    for column in ("name", "adapter", "weights", "description"):
        table.add_column(column, no_wrap=column != "description")
    for row in rows:
        table.add_row(*row.values())
    # Wide enough that names and hub ids never wrap, also when stdout is not a terminal.
    Console(width=max(140, Console().width)).print(table)
    return 0


def _build_tiny(args: argparse.Namespace) -> int:
    # lazy: PIL, numpy, tokenizers
    from model_adapters.checkpoint_info import describe
    from model_adapters.tiny import build_tiny

    start = time.perf_counter()
    path = build_tiny(args.name, args.out, seed=args.seed)
    info = describe(path)
    seconds = time.perf_counter() - start
    print(
        f"{args.name}: {info['architecture']}, {info['parameters']:,} parameters, seed {args.seed} → {path}"
    )
    print(f"built in {seconds:.1f} s")
    return 0
