"""Option letters are read against each agent's own view of the options and scored against the base's.

A rephrased view may reorder (or reword) the options; agent B's "D" then names a different option than the
base problem's D. The cohort maps each letter through its option text before answers are exchanged.
"""

from __future__ import annotations

from dataclasses import replace

from test_cohort import ForcedTexts

from corl_vl.config import config_from_dict
from corl_vl.data.paired import answer_in_base_options
from corl_vl.data.problem import Problem
from corl_vl.train.agent import Agent, AgentSettings
from corl_vl.train.cohort import Cohort
from model_adapters.registry import create_adapter

BASE = ["10", "20", "30", "40"]
REVERSED = ["40", "30", "20", "10"]


def test_letters_map_through_option_text():
    assert answer_in_base_options("D", REVERSED, BASE) == "A"
    assert answer_in_base_options("(B)", REVERSED, BASE) == "C"
    assert answer_in_base_options("D", BASE, BASE) == "D"  # same options: untouched
    assert answer_in_base_options("20", REVERSED, BASE) == "20"  # not a letter: compared by value
    assert answer_in_base_options(None, REVERSED, BASE) is None
    labelled = ["A. 40", "B. 30", "C. 20", "D. 10"]
    assert answer_in_base_options("A", labelled, BASE) == "D"
    # a reworded option has no base letter: its text is what gets compared
    assert answer_in_base_options("A", ["forty", "30", "20", "10"], BASE) == "forty"


def test_reversed_options_across_two_views_give_the_same_label():
    cfg = config_from_dict(
        {
            "agents": [{"name": "a", "model": "tiny-qwen2.5"}, {"name": "b", "model": "tiny-llama3"}],
            "data": {"limit": 2, "problems_per_step": 2},
            "grpo": {"k": 2, "max_new_tokens": 3},
            "train": {"warmup_ratio": 0, "scheduler": "constant"},
        }
    )
    base = [Problem(f"p{i}", f"Which is {10 * (i + 1)}?", choices=BASE) for i in range(2)]
    views = {"a": base, "b": [replace(p, choices=REVERSED) for p in base]}
    agents = []
    for acfg in cfg.agents:
        adapter = create_adapter(acfg.model)
        agents.append(
            Agent(acfg.name, adapter, adapter.load_model().train(), views[acfg.name], AgentSettings.of(cfg))
        )
    a, b = agents
    a.engine = ForcedTexts(a.engine, lambda pid, j, c: "so \\boxed{A}")  # option "10" in a's (the base) view
    b.engine = ForcedTexts(b.engine, lambda pid, j, c: "so \\boxed{D}")  # option "10" in b's reversed view
    cohort = Cohort(cfg, agents, base)
    metrics = cohort.step()
    st_a, st_b = cohort.last
    assert st_b.answers == {"p0": ["A", "A"], "p1": ["A", "A"]}  # stated against the base options
    assert st_a.labels == {"p0": "A", "p1": "A"} and st_b.labels == {"p0": "A", "p1": "A"}
    assert metrics["a"]["reward/mean"] == 1.0 and metrics["b"]["reward/mean"] == 1.0
