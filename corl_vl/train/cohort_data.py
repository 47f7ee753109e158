"""The cohort's problems and each agent's view of them: the original problems (synthetic or from a file), a
verified paired file, the text rendering for a text-only model, or co-rewarding-I's twins.

Why apart from the cohort step: what an agent is shown is decided once, at build time, from the config; the step
only hands out problem ids.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from corl_vl.config import CohortConfig
from corl_vl.data.datasets import load_problems
from corl_vl.data.paired import load_paired_view, verify_paired_views
from corl_vl.data.problem import Problem
from corl_vl.data.synth import generate_problems, to_text_problem
from corl_vl.errors import CorlError
from corl_vl.rewards.co_rewarding import twins_of

SYNTHETIC_DEFAULT_N = 256


# ------------------------------------------------------------------------------------------------ data
def load_base_problems(cfg: CohortConfig) -> list[Problem]:
    """The cohort's problems (the original view); their ids are what every agent is asked about."""
    data, exp = cfg.data, cfg.experiment
    if exp is not None:  # synthetic problems of the experiment's skills, as pictures or their text rendering
        problems = generate_problems(
            data.limit or SYNTHETIC_DEFAULT_N, seed=data.seed, split=data.split, skills=exp.skills
        )
        return [to_text_problem(p) for p in problems] if exp.text_view else problems
    if data.train == "synthetic":
        return generate_problems(data.limit or SYNTHETIC_DEFAULT_N, seed=data.seed, split=data.split)
    split = data.split if Path(data.train).is_dir() else None
    return load_problems(data.train, split=split, limit=data.limit)


def agent_view(
    base: Sequence[Problem], cfg: CohortConfig, data_view: str | None, text_only: bool
) -> list[Problem]:
    """An agent's rendering of ``base``: a verified paired file, the text rendering, or the original."""
    data = cfg.data
    if data_view:
        return load_paired_view(base, data_view, limit=data.limit)
    if not text_only or not any(p.images for p in base):
        return list(base)
    if data.train == "synthetic":
        return [to_text_problem(p) for p in base]
    split = data.split if Path(data.train).is_dir() else None
    view = load_problems(data.train, split=split, limit=data.limit, text_only=True)
    verify_paired_views(base, view, source=f"{data.train} (text rendering)")
    return view


def paired_views(base: Sequence[Problem], cfg: CohortConfig, agent: Any, text_only: bool) -> list[Problem]:
    """Co-rewarding-I's view: the original problems and, under their twin ids, the agent's rephrase."""
    if not agent.data_view:
        raise CorlError(
            f"agents.{agent.name}.data_view: reward.name={cfg.reward.name} needs each agent's rephrased view "
            "(a paired file; write one with `corl-vl data rephrase`)"
        )
    original = agent_view(base, cfg, None, text_only)
    return [*original, *twins_of(agent_view(base, cfg, agent.data_view, text_only))]
