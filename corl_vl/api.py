"""``corl_vl.evaluate``: each agent's greedy answers to a set of problems, with the training prompt format and
answer extraction (the one greedy evaluator, :mod:`corl_vl.eval.greedy`, through validation's metrics)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from corl_vl.data.problem import Problem
from corl_vl.train.validation import greedy_validation


def evaluate(
    cohort: Any, problems: Sequence[Problem], *, max_new_tokens: int | None = None
) -> dict[str, dict[str, Any]]:
    """Each agent's greedy answers to ``problems``: ``{agent: {"eval/accuracy", "eval/parsed_frac",
    "eval/peer_agreement"}}`` (accuracy only where the problems have answers). ``max_new_tokens`` defaults to
    the training budget ``grpo.max_new_tokens``."""
    budget = max_new_tokens if max_new_tokens is not None else cohort.cfg.grpo.max_new_tokens
    return greedy_validation(list(problems), budget)(cohort)
