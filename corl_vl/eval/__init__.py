"""Benchmark evaluation: loaders, official-compatible scorers, majority-vote ensembles, reports, generation.

Public API::

    problems = load_benchmark("mathvista", "path/to/testmini.json", annotations_only=True)
    results, records = score_responses("mathvista", problems, {"1": ["... \\\\boxed{1.2}"]})
    results, records = ensemble_scores("mathvista", problems, [responses_a, responses_b], k=4)
    by_run = evaluate_protocol(["runs/demo"], protocol="co-rl")  # = corl-vl eval --protocol co-rl --model runs/demo

``results`` is ``{"benchmark", "overall", "metrics", "breakdowns", ...}`` with accuracies as fractions.
The CLI is ``corl-vl eval`` (:mod:`corl_vl.cli.eval`); docs/evaluation.md describes every rule.
"""

from corl_vl.eval.benchmarks import BENCHMARKS, TEXT_BENCHMARKS, VISION_BENCHMARKS, get_spec
from corl_vl.eval.ensemble import ensemble_scores
from corl_vl.eval.loaders import load_benchmark
from corl_vl.eval.protocol import PROTOCOLS
from corl_vl.eval.report import read_responses, write_outputs
from corl_vl.eval.run_protocol import evaluate_protocol
from corl_vl.eval.scoring import RecordScore, get_scorer, score_responses

__all__ = [
    "BENCHMARKS",
    "PROTOCOLS",
    "TEXT_BENCHMARKS",
    "VISION_BENCHMARKS",
    "RecordScore",
    "ensemble_scores",
    "evaluate_protocol",
    "get_scorer",
    "get_spec",
    "load_benchmark",
    "read_responses",
    "score_responses",
    "write_outputs",
]
