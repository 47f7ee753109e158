"""What ``corl-vl eval`` shares between scoring given responses (:mod:`corl_vl.cli.eval`) and generating them
first (:mod:`corl_vl.cli._eval_generate`): which --data folder a benchmark reads, run labels, scoring a set.

Why a module of its own: both commands use these, and the scoring command hands over to the generating one.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from corl_vl.errors import CorlError
from corl_vl.eval.ensemble import ensemble_scores
from corl_vl.eval.scoring import score_responses

# Folder names of the benchmarks' own repositories, tried under --data when evaluating several benchmarks.
_FOLDER_ALIASES = {"wemath": ("we-math", "We-Math"), "mathvision": ("math-v", "MATH-V", "mathv")}


def _data_for(args: argparse.Namespace, name: str, several: bool) -> Path | None:
    """--data for this benchmark: its sub-folder when --data holds one per benchmark, else --data itself."""
    if args.data is None:
        return None
    candidates = (name, *_FOLDER_ALIASES.get(name, ()))
    if args.data.is_dir():
        for sub in candidates:
            if (args.data / sub).is_dir():
                return args.data / sub
    if several:
        raise CorlError(f"--data {args.data}: no sub-folder for {name} (tried {', '.join(candidates)})")
    return args.data


def _labels(items: list[str]) -> list[str]:
    """Short unique run names: preset names / folder or file stems, de-duplicated with a suffix."""
    labels: list[str] = []
    for item in items:
        base = Path(item).stem if item.endswith(".jsonl") else Path(item.rstrip("/")).name or item
        label, n = base, 2
        while label in labels:
            label, n = f"{base}-{n}", n + 1
        labels.append(label)
    return labels


def _warn(message: str) -> None:
    print(f"corl-vl eval: {message}", file=sys.stderr)


def _score_sets(
    name: str, problems: list[Any], sets: dict[str, dict[str, list[str]]], args: argparse.Namespace
) -> dict[str, tuple[dict[str, Any], dict[str, Any]]]:
    """Per-run results (each set alone) and, with --ensemble, the pooled majority vote."""
    modes = {"scoring": args.scoring, "extraction": args.extraction}
    extractor = _model_extractor(args)
    out = {}
    for label, responses in sets.items():
        extracted = None
        if extractor is not None:
            cache = args.output_dir / "extractions" / label / f"{name}.jsonl"
            extracted = extractor.extract(name, problems, responses, cache, progress=not args.no_progress)
        out[label] = score_responses(name, problems, responses, official_extractions=extracted, **modes)
    if args.ensemble:
        out["ensemble"] = ensemble_scores(
            name, problems, list(sets.values()), args.ensemble, tie_policy=args.tie_policy, **modes
        )
    return out


def _model_extractor(args: argparse.Namespace) -> Any:
    """The ``--extractor model:…`` extractor, loaded once per command; None for ``rules``."""
    # lazy: PIL, cli-help, numpy, tokenizers
    from corl_vl.eval.scoring.model_extractor import ModelExtractor, parse_extractor
    from model_adapters.dtypes import AUTO_DTYPE, resolve_dtype

    model = parse_extractor(args.extractor)
    if model is None:
        return None
    if getattr(args, "_extractor", None) is None:
        device = args.device or "cpu"
        args._extractor = ModelExtractor(
            model,
            engine=args.engine,
            device=device,
            batch_size=args.batch_size,
            dtype=resolve_dtype(args.dtype or AUTO_DTYPE, device),
        )
    return args._extractor
