"""Where a run's problems come from: generated (``synthetic``) or read (a file, a dataset folder, a recipe name or a
hub id, :func:`corl_vl.data.datasets.load_problems`). The one place that tells the two apart: the training
problems, an agent's text rendering of them and the validation set all come through here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from corl_vl.data.datasets import load_problems
from corl_vl.data.paired import verify_paired_views
from corl_vl.data.problem import Problem
from corl_vl.data.synth import generate_problems, to_text_problem

__all__ = ["DEFAULT_SCOPE", "SYNTHETIC", "SyntheticScope", "read_problems", "text_rendering"]

SYNTHETIC = "synthetic"


@dataclass(frozen=True)
class SyntheticScope:
    """Which synthetic problems a run asks about: those of ``skills`` (None: the five default skills), as
    pictures or, with ``text_view``, as their text rendering. An experiment narrows it to its own skills and
    view (:class:`corl_vl.experiment.Experiment`); a source read from a file ignores it."""

    skills: tuple[str, ...] | None = None
    text_view: bool = False


DEFAULT_SCOPE = SyntheticScope()  # the five default skills, as pictures


def read_problems(
    source: str,
    split: str,
    *,
    limit: int | None,
    seed: int,
    synthetic_n: int,
    scope: SyntheticScope | None = None,
    text_only: bool = False,
) -> list[Problem]:
    """``limit`` problems of ``source``'s ``split``: generated (``synthetic``: ``limit or synthetic_n`` problems
    of ``scope``, by default the five default skills as pictures, from ``seed``) or read (``split`` applies to a
    dataset folder; ``text_only``: the text fields)."""
    scope = scope or DEFAULT_SCOPE
    if source == SYNTHETIC:
        skills = list(scope.skills) if scope.skills is not None else None
        problems = generate_problems(limit or synthetic_n, seed=seed, split=split, skills=skills)
        return [to_text_problem(p) for p in problems] if scope.text_view else problems
    folder_split = split if Path(source).is_dir() else None
    return load_problems(source, split=folder_split, limit=limit, text_only=text_only)


def text_rendering(base: Sequence[Problem], source: str, split: str, *, limit: int | None) -> list[Problem]:
    """``base`` (problems of ``source``) as a text-only model sees them: the synthetic pictures described in
    words, or the source's own text fields, checked to be the same problems in the same order."""
    if source == SYNTHETIC:
        return [to_text_problem(p) for p in base]
    view = load_problems(source, split=split if Path(source).is_dir() else None, limit=limit, text_only=True)
    verify_paired_views(base, view, source=f"{source} (text rendering)")
    return view
