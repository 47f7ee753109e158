"""The cohort's problems and each agent's view of them: the original problems (synthetic or from a file), a
verified paired file, the text rendering for a text-only model, or co-rewarding-I's twins.

Why apart from the cohort step: what an agent is shown is decided once, at build time, from the config; the step
only hands out problem ids.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from corl_vl.config import DataConfig
from corl_vl.data.paired import load_paired_view
from corl_vl.data.problem import Problem
from corl_vl.data.sources import SyntheticScope, read_problems, text_rendering
from corl_vl.errors import CorlError
from corl_vl.rewards.co_rewarding import twins_of

SYNTHETIC_DEFAULT_N = 256


# ------------------------------------------------------------------------------------------------ data
def load_base_problems(data: DataConfig, scope: SyntheticScope | None = None) -> list[Problem]:
    """The cohort's problems (the original view); their ids are what every agent is asked about. ``scope``:
    which synthetic problems (an experiment's skills and view, :class:`corl_vl.experiment.Experiment`)."""
    return read_problems(
        data.train, data.split, limit=data.limit, seed=data.seed, synthetic_n=SYNTHETIC_DEFAULT_N, scope=scope
    )


def agent_view(
    base: Sequence[Problem], data: DataConfig, data_view: str | None, text_only: bool
) -> list[Problem]:
    """An agent's rendering of ``base``: a verified paired file, the text rendering, or the original."""
    if data_view:
        return load_paired_view(base, data_view, limit=data.limit)
    if not text_only or not any(p.images for p in base):
        return list(base)
    return text_rendering(base, data.train, data.split, limit=data.limit)


def paired_views(
    base: Sequence[Problem], data: DataConfig, agent: Any, text_only: bool, *, reward_name: str
) -> list[Problem]:
    """Co-rewarding-I's view: the original problems and, under their twin ids, the agent's rephrase."""
    if not agent.data_view:
        raise CorlError(
            f"agents.{agent.name}.data_view: reward.name={reward_name} needs each agent's rephrased view "
            "(a paired file; write one with `corl-vl data rephrase`)"
        )
    original = agent_view(base, data, None, text_only)
    return [*original, *twins_of(agent_view(base, data, agent.data_view, text_only))]
