"""``corl-vl adapters``: which model families this install can drive, and where each came from.

``list`` shows every registered adapter — built-in or added by a plugin package through the ``corl_vl.adapters``
entry point — with the checkpoint ``model_type`` values it auto-detects and the presets that use it, so a user can
check that a plugin was picked up before naming it in a cohort config.
"""

from __future__ import annotations

import argparse
import json


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("adapters", help="list model-family adapters (built-in and plugins)")
    sub = parser.add_subparsers(dest="adapters_command", metavar="ACTION")
    sub.required = True
    list_parser = sub.add_parser("list", help="every adapter: origin, detected model types, presets using it")
    list_parser.add_argument("--json", action="store_true", help="print JSON rows instead of a table")
    list_parser.set_defaults(func=_list)


def _rows() -> list[dict[str, str]]:
    from model_adapters.presets import PRESETS
    from model_adapters.registry import adapter_origin, list_adapters

    rows = []
    for name, cls in list_adapters().items():
        rows.append(
            {
                "adapter": name,
                "origin": adapter_origin(name),
                "class": f"{cls.__module__}.{cls.__qualname__}",
                "model_types": ", ".join(cls.model_types) or "-",
                "images": "yes" if cls.supports_images else "no",
                "is_cap": "off" if cls.importance_ratio_cap is None else f"{cls.importance_ratio_cap:g}",
                "presets": ", ".join(p.name for p in PRESETS.values() if p.adapter == name) or "-",
            }
        )
    return rows


def _list(args: argparse.Namespace) -> int:
    rows = _rows()
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table(title="corl-vl model adapters")
    for column in ("adapter", "origin", "model_types", "images", "is_cap", "presets"):
        table.add_column(column, no_wrap=column != "presets")
    for row in rows:
        table.add_row(*(row[c] for c in ("adapter", "origin", "model_types", "images", "is_cap", "presets")))
    Console(width=max(140, Console().width)).print(table)
    return 0
