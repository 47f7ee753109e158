"""Benchmark evaluation: loaders, official-compatible scorers, majority-vote ensembles, reports, generation.

Public API::

    problems = load_benchmark("mathvista", "path/to/testmini.json", annotations_only=True)
    results, records = score_responses("mathvista", problems, {"1": ["... \\\\boxed{1.2}"]})
    results, records = ensemble_scores("mathvista", problems, [responses_a, responses_b], k=4)

``results`` is ``{"benchmark", "overall", "metrics", "breakdowns", ...}`` with accuracies as fractions.
The CLI is ``corl-vl eval`` (:mod:`corl_vl.cli.eval`); from Python, ``corl_vl.evaluate_protocol`` runs it (it lives
above ``corl_vl.cli``, which imports this package). docs/evaluation.md describes every rule.
"""

from corl_vl.eval.benchmarks import BENCHMARKS, TEXT_BENCHMARKS, VISION_BENCHMARKS, get_spec
from corl_vl.eval.ensemble import ensemble_scores
from corl_vl.eval.loaders import load_benchmark
from corl_vl.eval.protocol import PROTOCOLS
from corl_vl.eval.report import read_responses, write_outputs
from corl_vl.eval.scoring import RecordScore, get_scorer, score_responses

__all__ = [
    "BENCHMARKS",
    "PROTOCOLS",
    "TEXT_BENCHMARKS",
    "VISION_BENCHMARKS",
    "RecordScore",
    "ensemble_scores",
    "get_scorer",
    "get_spec",
    "load_benchmark",
    "read_responses",
    "score_responses",
    "write_outputs",
]


def __getattr__(name: str) -> object:
    if name == "evaluate_protocol":  # it moved above corl_vl.cli, which imports this package
        raise AttributeError("corl_vl.eval.evaluate_protocol moved: use corl_vl.evaluate_protocol")
    raise AttributeError(f"module 'corl_vl.eval' has no attribute {name!r}")
