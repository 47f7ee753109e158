"""``data.max_prompt_tokens``: problems whose prompt is too long for any agent are dropped at build time, for
every agent alike, and counted."""

from __future__ import annotations

import pytest
from test_cohort import TINY, TINY_COHORT

from corl_vl.config import load_config
from corl_vl.errors import CorlError
from corl_vl.train.cohort import Cohort
from corl_vl.train.cohort_data import load_base_problems


def test_long_prompts_are_dropped_for_every_agent_and_counted():
    cfg = load_config(TINY_COHORT, [*TINY, "data.limit=6"])
    cohort = Cohort.from_config(cfg)
    ids = [p.id for p in load_base_problems(cfg.data)]
    longest = {pid: max(len(a.encode([pid])[0]) for a in cohort.agents) for pid in ids}
    limit = sorted(longest.values())[2]  # at least 3 of 6 fit
    want = [pid for pid in ids if longest[pid] <= limit]
    assert len(ids) - len(want) > 0, "the tiny problems' prompts should differ in length"

    bounded = Cohort.from_config(
        load_config(TINY_COHORT, [*TINY, "data.limit=6", f"data.max_prompt_tokens={limit}"])
    )
    assert bounded.dropped_prompts == len(ids) - len(want)
    assert sorted(bounded.sampler.ids) == sorted(want) and set(bounded.base) == set(want)


def test_a_bound_below_every_prompt_is_one_clear_error():
    with pytest.raises(CorlError, match=r"data\.max_prompt_tokens=1: every training prompt is longer"):
        Cohort.from_config(load_config(TINY_COHORT, [*TINY, "data.max_prompt_tokens=1"]))
