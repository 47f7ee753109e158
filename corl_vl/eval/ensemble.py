"""Majority-vote ensembles: the paper's matched-budget control.

Two base models trained independently (TTRL) pool 4 responses each and majority-vote at inference; the
Co-RL pair is pooled the same way. Here: take the first ``k`` responses of each response set for a record,
extract each with the benchmark's extractor, cluster by mathematical equivalence and vote
(:func:`corl_vl.answers.vote`), then judge the voted label once with the benchmark's judge.

Ties: ``"first"`` (default) lets the cluster seen first win — the usual majority-vote@k convention, and
deterministic because sets are pooled in the order given; ``"none"`` scores a tie as no answer (wrong).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from corl_vl.answers import vote
from corl_vl.data.problem import Problem
from corl_vl.errors import CorlError
from corl_vl.eval.scoring import get_scorer
from corl_vl.eval.scoring.base import RecordScore, Scorer


def pool(response_sets: Sequence[Mapping[str, Sequence[str]]], record_id: str, k: int) -> list[str]:
    """The first ``k`` responses of each set for ``record_id``, in set order."""
    return [r for responses in response_sets for r in list(responses.get(record_id, ()))[:k]]


def ensemble_record(
    scorer: Scorer, problem: Problem, pooled: Sequence[str], *, tie_policy: str = "first"
) -> RecordScore:
    """Vote over the pooled responses' extracted answers and judge the label."""
    extracted = [scorer.extract(problem, r) for r in pooled]
    if not pooled:
        return RecordScore(problem.id, [], [], [], ensemble=True)
    result = vote(extracted, choices=scorer.choices(problem), tie_policy=tie_policy)
    label = result.label
    verified = scorer.judge(problem, label) if label is not None else False
    official = scorer.official_judge(problem, label) if label is not None else False
    return RecordScore(
        problem.id,
        list(pooled),
        extracted,
        [verified if scorer.scoring == "verified" else official],
        vote=label,
        vote_share=result.share,
        ensemble=True,
        correct_official=[official],
        correct_verified=[verified],
    )


def ensemble_scores(
    benchmark: str,
    problems: Sequence[Problem],
    response_sets: Sequence[Mapping[str, Sequence[str]]],
    k: int,
    *,
    tie_policy: str = "first",
    scoring: str = "official",
    extraction: str = "lenient",
) -> tuple[dict[str, Any], dict[str, RecordScore]]:
    """Results of the majority vote over ``k`` responses from each set (e.g. 4 from each of two models).

    The vote runs over the verified-mode extractions; the label is then judged by both rules."""
    if k < 1:
        raise CorlError(f"--ensemble must be at least 1, got {k}")
    if not response_sets:
        raise CorlError("an ensemble needs at least one set of responses")
    scorer = get_scorer(benchmark, scoring=scoring, extraction=extraction)
    records = {
        p.id: ensemble_record(scorer, p, pool(response_sets, p.id, k), tie_policy=tie_policy)
        for p in problems
    }
    results = scorer.results(problems, records)
    results["ensemble"] = {"members": len(response_sets), "k_per_member": k, "tie_policy": tie_policy}
    shares = [r.vote_share for r in records.values() if r.vote_share is not None and r.vote is not None]
    results["metrics"]["vote_share_mean"] = sum(shares) / len(shares) if shares else 0.0
    results["metrics"]["no_label_rate"] = sum(r.vote is None for r in records.values()) / max(1, len(records))
    return results, records
