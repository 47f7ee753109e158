"""``corl-vl eval``: score benchmark responses, or generate them first, and write the results.

Two modes:

- score existing responses: ``--benchmark B --data PATH --responses R.jsonl [--responses R2.jsonl …]``
  (lines with ``id`` and ``response``; PATH is the benchmark folder or its annotation file; only the
  annotations are needed). Records without a response count as wrong and are listed in results.json.
- generate, then score: ``--model PATH_OR_PRESET [--model …] --benchmark B|all [--data PATH] [--limit N]``
  with the paper's decoding defaults, through the training adapters and rollout engine; resumable.

Scoring (docs/grading.md): ``--scoring official`` (default; each benchmark's published rules), ``verified``
(``--extraction lenient|strict`` + math equivalence) or ``quick-match`` (MathVerse's ``--quick_match`` in place
of its judge) picks the headline; both overalls are always written. ``--protocol co-rl`` fixes the paper's
evaluation settings (decoding, budgets, images, samples, splits, prompt format, grader) and records them.
``--extractor model:PATH_OR_PRESET`` runs MathVista's / MathVerse's official extraction prompt through a local
model (cached per record) instead of the rule-based extraction.

``--ensemble K`` pools K responses from each response file / model and majority-votes (the paper's
matched-budget control). Outputs in ``--output-dir``: results.json, responses.jsonl, report.md, report.png
(one run on one benchmark); several go to ``<run>/<benchmark>/`` with one report.md and report.png.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any

from corl_vl.cli._eval_shared import _data_for, _labels, _score_sets, _warn
from corl_vl.cli.grade import check_quick_match
from corl_vl.errors import CorlError
from corl_vl.eval.benchmarks import BENCHMARKS, TEXT_BENCHMARKS, VISION_BENCHMARKS, get_spec
from corl_vl.eval.loaders import load_benchmark
from corl_vl.eval.protocol import PROTOCOLS, apply_protocol, get_protocol
from corl_vl.eval.report import check_ids, overall_text, read_responses, write_outputs
from corl_vl.io import check_output_path


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "eval",
        help="evaluate models or response files on MathVista, MathVerse, We-Math, MathVision and text benchmarks",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--benchmark",
        action="append",
        help=f"one of {', '.join(BENCHMARKS)}, or all / vision / text; repeat or comma-separate for several "
        "(required, except with --protocol: its benchmarks)",
    )
    p.add_argument(
        "--protocol",
        choices=tuple(PROTOCOLS),
        help="a paper's evaluation settings in one flag: co-rl = the Co-RL paper's App. D.5 (decoding, budgets, "
        "image size, samples, splits, prompt format, grader; docs/evaluation.md); recorded in the report",
    )
    p.add_argument("--data", type=Path, help="local benchmark folder or annotation file (default: the hub)")
    p.add_argument("--split", help="benchmark split (default: testmini for the vision benchmarks)")
    p.add_argument("--limit", type=int, help="evaluate only the first N records of each benchmark")
    p.add_argument(
        "--output-dir", type=Path, help="where results go (required, except for a run: RUN_DIR/eval/step-N)"
    )
    p.add_argument("--responses", action="append", type=Path, help="JSONL of id + response (repeatable)")
    p.add_argument(
        "--allow-multiple",
        action="store_true",
        help="--responses: accept an id on several lines and score them together (avg@k)",
    )
    p.add_argument(
        "--model",
        action="append",
        help="preset, checkpoint folder, or a training run folder (= each agent at its latest checkpoint); "
        "repeatable",
    )
    p.add_argument("--step", type=int, help="with --model RUN_DIR: the checkpoint step instead of the latest")
    p.add_argument(
        "--baseline-models",
        action="store_true",
        help="with --model RUN_DIR: also evaluate each agent's base model (from the run's config.yaml), side by side",
    )
    p.add_argument(
        "--adapter",
        help="adapter name (default: from the preset, or the checkpoint's config.json model_type)",
    )
    p.add_argument("--ensemble", type=int, help="pool K responses from each model / file and majority-vote")
    p.add_argument("--tie-policy", default="first", choices=("first", "none"), help="ensemble ties")
    p.add_argument(
        "--scoring",
        choices=("official", "verified", "quick-match"),
        help="headline verdicts: the benchmark's official rules (default; comparable with published tables), "
        "verified (math equivalence), or quick-match (MathVerse only: its --quick_match exact match in place of "
        "its judge); both overalls are always written (docs/grading.md)",
    )
    p.add_argument(
        "--extraction",
        choices=("strict", "lenient"),
        help="answer extraction for verified scoring (default lenient: free prose too; strict: markers only)",
    )
    p.add_argument(
        "--extractor",
        help="official extraction: rules (default) or model:PATH_OR_PRESET, a local model running the "
        "benchmark's official extraction prompt (MathVista, MathVerse); cached per record",
    )
    _add_generation_flags(p)
    p.set_defaults(func=run)


def _add_generation_flags(p: argparse.ArgumentParser) -> None:
    """The flags of generating responses (--model): decoding, images, loading, progress."""
    p.add_argument("--samples", type=int, help="responses per record (default 1; AMC 8: avg@8)")
    p.add_argument("--temperature", type=float, help="override the decoding temperature (0 = greedy)")
    p.add_argument("--top-p", type=float, help="override top-p")
    p.add_argument("--max-new-tokens", type=int, help="override (default 16384 vision, 3072 text)")
    p.add_argument("--max-long-side", type=int, help="image long-side cap in pixels (default 1024)")
    p.add_argument("--batch-size", type=int, help="completions per generate call (default 8)")
    p.add_argument("--engine", choices=("hf", "vllm"), help="rollout engine (default hf)")
    p.add_argument("--device", default=None, help="torch device (default: cuda if available, else cpu)")
    p.add_argument("--dtype", default=None, help="float32 | bfloat16 | float16 (default: bf16 on GPU)")
    p.add_argument(
        "--answer-format", help="answer instruction: boxed | answer_tags | none (default: as in training)"
    )
    p.add_argument("--seed", type=int, help="sampling seed (default 0)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def _benchmarks(values: list[str]) -> list[str]:
    groups = {"all": BENCHMARKS, "vision": VISION_BENCHMARKS, "text": TEXT_BENCHMARKS}
    names: list[str] = []
    for value in values:
        for item in filter(None, (v.strip() for v in value.split(","))):
            for name in groups.get(item, (item,)):
                get_spec(name)
                if name not in names:
                    names.append(name)
    return names


def _check_extractor(spec: str, names: list[str]) -> None:
    """Refuse a bad ``--extractor`` before anything is loaded or generated."""
    # lazy: cli-help
    from corl_vl.eval.scoring.model_extractor import MODEL_EXTRACTED, parse_extractor

    if parse_extractor(spec) is not None and any(n not in MODEL_EXTRACTED for n in names):
        other = next(n for n in names if n not in MODEL_EXTRACTED)
        raise CorlError(
            f"--extractor {spec}: {other} is scored by its official rules; a model extractor applies to "
            f"{', '.join(MODEL_EXTRACTED)} (whose official pipelines extract with a model)"
        )


def run(args: argparse.Namespace) -> int:
    try:
        return _run(args)
    finally:
        extractor = getattr(args, "_extractor", None)
        if extractor is not None:  # loaded once per command; its vLLM engine holds a cache folder
            extractor.close()


# Flags that only change how responses are generated, and their defaults; the last four also load a
# --extractor model, so they apply to --responses with one.
_GENERATION = {
    "samples": None,
    "temperature": None,
    "top_p": None,
    "max_new_tokens": None,
    "max_long_side": 1024,
    "answer_format": None,
    "seed": 0,
    "adapter": None,
}
_LOADING = {"engine": "hf", "device": None, "dtype": None, "batch_size": 8}
_SCORING = {"scoring": "official", "extraction": "lenient", "extractor": "rules"}


def _flag(dest: str) -> str:
    return "--" + dest.replace("_", "-")


def _check_flags(args: argparse.Namespace) -> None:
    """Refuse values that would be ignored or silently replaced, in one line, before anything loads; then
    fill in the defaults."""
    # lazy: cli-help
    from corl_vl.eval.generate import check_device
    from corl_vl.eval.scoring.model_extractor import parse_extractor

    if args.responses:
        applies = (
            _GENERATION
            if parse_extractor(args.extractor or "rules") is not None
            else {**_GENERATION, **_LOADING}
        )
        given = [dest for dest in applies if getattr(args, dest) is not None]
        if given:
            raise CorlError(
                f"{_flag(given[0])} applies to generating responses (--model); --responses are scored as they "
                "are, drop it"
            )
    for dest in ("limit", "ensemble", "samples", "max_new_tokens", "max_long_side", "batch_size"):
        value = getattr(args, dest)
        if value is not None and value < 1:
            raise CorlError(f"{_flag(dest)} must be at least 1, got {value}")
    if args.temperature is not None and not (math.isfinite(args.temperature) and args.temperature >= 0):
        raise CorlError(f"--temperature must be a finite number ≥ 0 (0 = greedy), got {args.temperature}")
    if args.top_p is not None and not (math.isfinite(args.top_p) and 0 < args.top_p <= 1):
        raise CorlError(f"--top-p must be in (0, 1], got {args.top_p}")
    for dest, default in {**_GENERATION, **_LOADING, **_SCORING}.items():
        if getattr(args, dest) is None:
            setattr(args, dest, default)
    if args.device is not None:
        check_device(args.device)


def _use_protocol(args: argparse.Namespace) -> None:
    """``--protocol``: fix its settings (refusing a flag that would change one); else --benchmark is needed."""
    name = getattr(args, "protocol", None)
    args.protocol_spec = None
    if name is None:
        if not args.benchmark:
            raise CorlError("--benchmark is required (or --protocol co-rl, which names its benchmarks)")
        return
    if args.responses:
        raise CorlError(
            f"--protocol {name} generates responses with the paper's settings; give --model (or score "
            "--responses without --protocol)"
        )
    protocol = get_protocol(name)
    given = [dest for dest in protocol.flags if getattr(args, dest, None) is not None]
    apply_protocol(protocol, args, given)
    args.protocol_spec = protocol


def _run(args: argparse.Namespace) -> int:
    if bool(args.responses) == bool(args.model):
        raise CorlError("give either --responses (score existing responses) or --model (generate), not both")
    _use_protocol(args)
    _check_flags(args)
    names = _benchmarks(args.benchmark)
    check_quick_match(args.scoring, names)
    _check_extractor(args.extractor, names)
    several = len(names) > 1
    runs: dict[str, dict[str, tuple[dict[str, Any], dict[str, Any]]]] = {}
    if args.model:  # run folders become their agents (docs/evaluation.md, "Evaluating a run")
        # lazy: cli-help
        from corl_vl.eval.runs import expand_models

        expanded = expand_models(
            args.model, step=args.step, baselines=args.baseline_models, labels=_labels(args.model)
        )
        args.model, args.model_labels = expanded.models, expanded.labels
        args.output_dir = args.output_dir or expanded.default_output_dir
    elif args.step is not None or args.baseline_models:
        raise CorlError("--step and --baseline-models apply to --model RUN_DIR")
    if args.output_dir is None:
        raise CorlError("--output-dir is required (only a run folder given as --model has a default)")
    check_output_path(args.output_dir, folder=True, flag="--output-dir")

    if args.responses:
        if several:
            raise CorlError("--responses scores one benchmark at a time; give a single --benchmark")
        name = names[0]
        problems = load_benchmark(
            name, _data_for(args, name, False), split=args.split, annotations_only=True, limit=args.limit
        )
        sets: dict[str, dict[str, list[str]]] = {}
        for label, path in zip(_labels([str(p) for p in args.responses]), args.responses):
            responses = read_responses(path, allow_multiple=args.allow_multiple)
            unknown = check_ids(responses, (p.id for p in problems), str(path))
            if unknown and args.limit is None:
                _warn(f"{path}: {len(unknown)} ids are not records of {name} (ignored), e.g. {unknown[0]}")
            sets[label] = responses
        for label, pair in _score_sets(name, problems, sets, args).items():
            runs.setdefault(label, {})[name] = pair
    else:
        # lazy: cli-help
        from corl_vl.cli._eval_generate import generate_and_score

        runs = generate_and_score(args, names, several)

    written = write_outputs(args.output_dir, runs)
    for key, path in written.items():
        run_name, bench = key.split("/", 1)
        res = runs[run_name][bench][0]
        missing = f", {res['n_missing']} without a response" if res["n_missing"] else ""
        print(f"{key}: overall {overall_text(res)} on {res['n_records']} records{missing} → {path}")
    print(f"report: {args.output_dir / 'report.md'}")
    return 0
