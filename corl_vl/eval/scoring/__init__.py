"""Benchmark scorers: one per benchmark, all with the same interface (:class:`~.base.Scorer`).

:func:`score_responses` is the entry point: problems + responses keyed by id → the results dict and the
per-record verdicts. Records without a response count as wrong and are listed in ``missing_ids``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from corl_vl.data.problem import Problem
from corl_vl.errors import CorlError
from corl_vl.eval.scoring.base import SCORING_MODES, RecordScore, Scorer
from corl_vl.eval.scoring.mathverse import MathVerseScorer
from corl_vl.eval.scoring.mathvision import MathVisionScorer
from corl_vl.eval.scoring.mathvista import MathVistaScorer
from corl_vl.eval.scoring.text import AIMEScorer, AMCScorer, GPQAScorer, GSM8KScorer, Math500Scorer
from corl_vl.eval.scoring.wemath import WeMathScorer

SCORERS: dict[str, type[Scorer]] = {
    "mathvista": MathVistaScorer,
    "mathverse": MathVerseScorer,
    "wemath": WeMathScorer,
    "mathvision": MathVisionScorer,
    "math500": Math500Scorer,
    "amc": AMCScorer,
    "aime": AIMEScorer,
    "gpqa": GPQAScorer,
    "gsm8k": GSM8KScorer,
}

__all__ = [
    "SCORERS",
    "SCORING_MODES",
    "RecordScore",
    "Scorer",
    "get_scorer",
    "score_records",
    "score_responses",
]


def get_scorer(
    name: str,
    *,
    scoring: str = "official",
    extraction: str = "lenient",
    official_extractions: Mapping[str, Sequence[str | None]] | None = None,
) -> Scorer:
    """A fresh scorer for benchmark ``name``: ``scoring`` picks the headline verdicts (``official``,
    ``verified``, or ``quick-match``: official with MathVerse's exact match in place of its judge), ``extraction`` the verified-mode extractor (``lenient`` or ``strict``)."""
    if name not in SCORERS:
        raise CorlError(f"no scorer for benchmark '{name}'; known: {', '.join(SCORERS)}")
    return SCORERS[name](scoring=scoring, extraction=extraction, official_extractions=official_extractions)


def score_records(
    name: str, problems: Sequence[Problem], records: Mapping[str, RecordScore]
) -> dict[str, Any]:
    """The results dict for already-scored records (e.g. ensembles)."""
    return get_scorer(name).results(problems, records)


def score_responses(
    name: str,
    problems: Sequence[Problem],
    responses: Mapping[str, Sequence[str]],
    *,
    scoring: str = "official",
    extraction: str = "lenient",
    official_extractions: Mapping[str, Sequence[str | None]] | None = None,
) -> tuple[dict[str, Any], dict[str, RecordScore]]:
    """Score ``responses[id]`` (one or more responses per record) for every problem, both ways.

    Returns ``(results, records)``: the results dict (``benchmark``, ``overall`` (the ``scoring`` one),
    ``overall_official``, ``overall_verified``, ``n_disagree``, ``metrics``, ``breakdowns``, counts and
    ``missing_ids``) and the per-record verdicts keyed by id, in problem order. ``official_extractions``
    (id → one answer per response, e.g. from a model extractor) replace the official rule-based extraction.
    """
    scorer = get_scorer(
        name, scoring=scoring, extraction=extraction, official_extractions=official_extractions
    )
    records = {p.id: scorer.score_record(p, list(responses.get(p.id, ()))) for p in problems}
    return scorer.results(problems, records), records
