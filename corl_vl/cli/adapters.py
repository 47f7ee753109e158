"""``corl-vl adapters``: which model families this install can drive, and where each came from.

``list`` shows every registered adapter — built-in or added by a plugin package through the ``corl_vl.adapters``
entry point — with the checkpoint ``model_type`` values it auto-detects and the presets that use it, so a user can
check that a plugin was picked up before naming it in a cohort config.

``check PATH`` renders a text problem and an image problem with a checkpoint's own template and prints the
prompts, stop tokens, BOS count and image-token count, so a new checkpoint's prompt format is checked in seconds.
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
    check = sub.add_parser(
        "check",
        help="render a text and an image problem with a checkpoint: prompts, stop tokens, BOS and image tokens",
    )
    check.add_argument("path", metavar="PATH", help="local checkpoint folder (or a preset / hub id)")
    check.add_argument("--adapter", help="adapter name (default: detected from the checkpoint's config.json)")
    check.add_argument("--template-date", metavar="YYYY-MM-DD", help="pin the template's clock to this date")
    check.add_argument("--json", action="store_true", help="print the report as JSON")
    check.set_defaults(func=_check)


def _rows() -> list[dict[str, str]]:
    # lazy: PIL, numpy, tokenizers
    from model_adapters.presets import all_presets
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
                "presets": ", ".join(p.name for p in all_presets().values() if p.adapter == name) or "-",
            }
        )
    return rows


def _list(args: argparse.Namespace) -> int:
    rows = _rows()
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    # lazy: rich
    from rich.console import Console
    from rich.table import Table

    table = Table(title="corl-vl model adapters")
    for column in ("adapter", "origin", "model_types", "images", "is_cap", "presets"):
        table.add_column(column, no_wrap=column != "presets")
    for row in rows:
        table.add_row(*(row[c] for c in ("adapter", "origin", "model_types", "images", "is_cap", "presets")))
    Console(width=max(140, Console().width)).print(table)
    return 0


def _check(args: argparse.Namespace) -> int:
    # lazy: PIL, numpy, tokenizers
    from model_adapters.prompt_check import check_adapter
    from model_adapters.registry import create_adapter

    options = {"template_date": args.template_date} if args.template_date else {}
    report = check_adapter(create_adapter(args.path, adapter=args.adapter, **options))
    if args.json:
        print(json.dumps(report.to_dict(), indent=2, ensure_ascii=False))
        return 0 if report.ok else 1
    clock = f"reads the clock; pinned to {report.template_date}" if report.template_reads_clock else "no date"
    print(f"checkpoint: {report.model}")
    print(f"adapter:    {report.adapter}")
    print(f"template:   {clock}")
    print("stop tokens: " + ", ".join(f"{tok} ({i})" for i, tok in report.stop_tokens))
    print(f"BOS token:  {report.bos_token or '(none)'}    image token: {report.image_token or '(text-only)'}")
    for p in report.prompts:
        print(f"\n== {p.kind} problem ({p.images} image{'s' if p.images != 1 else ''}) ==")
        if p.error:
            print(f"FAIL: {p.error}")
            continue
        bos_note = "  <- more than one BOS: the model sees a doubled start" if p.bos_count > 1 else ""
        print(
            f"prompt tokens: {p.prompt_tokens}   BOS count: {p.bos_count}{bos_note}   image tokens: {p.image_tokens}"
        )
        print("--- rendered prompt (one placeholder per image; the processor expands it) ---")
        print(p.prompt_text)
        print("--- end ---")
    print("\nOK" if report.ok else "\nPROBLEMS FOUND (see above)")
    return 0 if report.ok else 1
