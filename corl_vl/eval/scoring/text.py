"""Scorers for the text benchmarks: the shared extractor and equivalence check, breakdowns where useful.

MATH-500 (per subject and level), AMC (avg@k: a record's score is the mean over its k responses), AIME,
GPQA-Diamond (gold is the letter of the correct option after the fixed-seed shuffle; the option's text is
accepted too), GSM8K (the number after ``####``).
"""

from __future__ import annotations

from dataclasses import dataclass

from corl_vl.eval.scoring.base import Scorer


@dataclass
class Math500Scorer(Scorer):
    name: str = "math500"
    breakdown_keys: tuple[str, ...] = ("subject", "level")


@dataclass
class AMCScorer(Scorer):
    name: str = "amc"


@dataclass
class AIMEScorer(Scorer):
    name: str = "aime"
    breakdown_keys: tuple[str, ...] = ("year",)


@dataclass
class GPQAScorer(Scorer):
    name: str = "gpqa"
    breakdown_keys: tuple[str, ...] = ("domain",)


@dataclass
class GSM8KScorer(Scorer):
    name: str = "gsm8k"
