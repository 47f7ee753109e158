"""The two public helpers that are not simply another module's function: building a cohort and evaluating it.

Why here: ``corl_vl`` exports a handful of names for scripts (see its docstring); these two wrap the trainer's
classes with the defaults a script wants (CPU unless a GPU is there; greedy validation with the training
prompt format and answer extraction).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from corl_vl.config import CohortConfig
from corl_vl.data.problem import Problem
from corl_vl.train.cohort import Cohort
from corl_vl.train.validation import greedy_validation


def build_cohort(
    config: CohortConfig, *, device: str | None = None, problems: Sequence[Problem] | None = None
) -> Cohort:
    """Every agent of ``config`` with its model, optimizer and rollout engine, on ``device`` (default: the GPU
    if there is one, else the CPU); ``problems`` replaces the training data named in ``config.data``."""
    import torch  # the models need it anyway; imported here so `import corl_vl` stays light

    torch.manual_seed(config.train.seed)
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    return Cohort.from_config(config, device=device, problems=problems)


def evaluate(
    cohort: Cohort, problems: Sequence[Problem], *, max_new_tokens: int | None = None
) -> dict[str, dict[str, Any]]:
    """Each agent's greedy answers to ``problems``: ``{agent: {"eval/accuracy", "eval/parsed_frac",
    "eval/peer_agreement"}}`` (accuracy only where the problems have answers). ``max_new_tokens`` defaults to
    the training budget ``grpo.max_new_tokens``."""
    budget = max_new_tokens if max_new_tokens is not None else cohort.cfg.grpo.max_new_tokens
    return greedy_validation(list(problems), budget)(cohort)
