"""``corl-vl eval --model …``: generate each model's responses on each benchmark (cached, resumable), then score
them as :mod:`corl_vl.cli.eval` scores response files."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import Any

from corl_vl.cli._eval_shared import _data_for, _labels, _score_sets, _warn
from corl_vl.eval.benchmarks import get_spec
from corl_vl.eval.generate import Generator, default_decoding
from corl_vl.eval.loaders import load_benchmark
from corl_vl.eval.protocol import describe_split, split_for

# a model this small is a tiny test or demo model: random ones never stop, warm-started ones answer in a few
# tokens, so the benchmark's budget (thousands of tokens) would only make the run take minutes
SMALL_MODEL_PARAMS = 20_000_000
SMALL_MODEL_TOKENS = 64


def _small_model_budget(generator: Any, label: str) -> int | None:
    """``SMALL_MODEL_TOKENS`` for a model under ``SMALL_MODEL_PARAMS`` parameters (said once), else None."""
    # lazy: PIL, numpy, tokenizers
    from model_adapters.checkpoint_info import count_parameters

    folder = Path(generator.adapter.model_path)
    size = count_parameters(folder) if folder.is_dir() else 0  # a hub id: a real model
    if not 0 < size < SMALL_MODEL_PARAMS:
        return None
    _warn(
        f"{label} is a small model ({size / 1e6:.1f} M parameters): at most {SMALL_MODEL_TOKENS} new tokens "
        "per response unless --max-new-tokens says otherwise"
    )
    return SMALL_MODEL_TOKENS


def generate_and_score(
    args: argparse.Namespace, names: list[str], several: bool
) -> dict[str, dict[str, tuple[dict[str, Any], dict[str, Any]]]]:
    """Responses of every ``--model`` on every benchmark in ``names``, scored: run label → benchmark →
    (results, report inputs)."""
    # lazy: PIL, numpy, tokenizers, torch
    import torch

    from model_adapters.dtypes import AUTO_DTYPE, resolve_dtype

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    dtype = resolve_dtype(args.dtype or AUTO_DTYPE, device)
    labels = getattr(args, "model_labels", None) or _labels(args.model)
    protocol = getattr(args, "protocol_spec", None)
    data = {n: _data_for(args, n, several) for n in names}
    splits = {n: split_for(protocol, n, data[n], args.split) for n in names}
    problems = {n: load_benchmark(n, data[n], split=splits[n], limit=args.limit) for n in names}
    used: dict[tuple[str, str], dict[str, Any]] = {}  # (run, benchmark) → the decoding it generated with
    generated: dict[str, dict[str, dict[str, list[str]]]] = {n: {} for n in names}  # bench → run → responses
    for label, model in zip(labels, args.model):
        with Generator(
            model,
            adapter=args.adapter,
            engine=args.engine,
            device=device,
            batch_size=args.batch_size,
            max_long_side=args.max_long_side,
            dtype=dtype,
            answer_format=args.answer_format,
        ) as generator:
            for name in names:
                spec = get_spec(name)
                if spec.multimodal and not generator.supports_images:
                    _warn(f"{label} is a text-only model: skipping {name}")
                    continue
                samples = args.samples or max(spec.samples, args.ensemble or 1)
                decoding = default_decoding(
                    spec.multimodal,
                    samples,
                    temperature=args.temperature,
                    top_p=args.top_p,
                    max_new_tokens=args.max_new_tokens or _small_model_budget(generator, label),
                    seed=args.seed,
                )
                used[label, name] = (
                    dataclasses.asdict(decoding)
                    | {
                        "max_long_side": args.max_long_side,
                        "answer_format": generator.adapter.answer_format,  # the checkpoint's, unless --answer-format
                    }
                )
                cache = args.output_dir / "generations" / label / f"{name}.jsonl"
                generated[name][label] = generator.generate(
                    problems[name],
                    decoding,
                    cache,
                    progress=not args.no_progress,
                    description=f"{label} · {name}",
                )
        del generator
        if device.startswith("cuda"):
            torch.cuda.empty_cache()
    runs: dict[str, dict[str, tuple[dict[str, Any], dict[str, Any]]]] = {}
    for name in names:
        split = describe_split(name, data[name], splits[name], len(problems[name]))
        for label, (results, records) in _score_sets(name, problems[name], generated[name], args).items():
            results["split"] = split
            if (label, name) in used:
                results["decoding"] = used[label, name]
            if protocol is not None:
                results["protocol"] = protocol.record()
            runs.setdefault(label, {})[name] = (results, records)
    return runs
