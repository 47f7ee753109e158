"""Periodic validation (``eval:``) configured as users write it: experiments validate on their own skills and
views, and a validation that fails keeps the step's metrics."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from test_cohort import TINY, TINY_COHORT, ForcedTexts, boxed

from corl_vl.config import load_config
from corl_vl.errors import CorlError
from corl_vl.experiment import demo_config, wrapper_for
from corl_vl.recipe import train
from corl_vl.train.validation import PeriodicEval


def test_experiment_validation_asks_about_its_own_skills_in_its_own_view(tmp_path):
    # the demo config validates as it is: the synthetic validation split, no test split named (issue #42)
    cfg = demo_config(["eval.every=1", "eval.limit=6"])
    # the experiment wraps the recipe: its scope (skills, view) reaches the validation set
    problems = PeriodicEval.from_config(SimpleNamespace(cfg=cfg), tmp_path, wrapper_for(cfg).scope).problems
    assert {p.meta["skill"] for p in problems} == {"figure_color", "ground_color"}
    assert all(p.images for p in problems) and all(p.id.startswith("synth-validation-") for p in problems)
    text = demo_config(["eval.every=1", "eval.limit=6", "experiment.warm_start.text_view=true"])
    scope = wrapper_for(text).scope
    assert not any(
        p.images for p in PeriodicEval.from_config(SimpleNamespace(cfg=text), tmp_path, scope).problems
    )


def test_a_failed_validation_keeps_the_steps_metrics(tmp_path, monkeypatch):
    out = tmp_path / "run"
    overrides = [*TINY, "train.max_steps=2", f"train.output_dir={out}", "train.report_to=[none]"]
    cfg = load_config(TINY_COHORT, [*overrides, "eval.every=1", "eval.split=test", "eval.limit=2"])

    def broken(*args, **kwargs):
        raise CorlError("validation: the engine broke")

    monkeypatch.setattr("corl_vl.train.validation.greedy_answers", broken)

    def prepare(cohort):
        for agent in cohort.agents:
            agent.engine = ForcedTexts(agent.engine, boxed(1, 1, 1, 2))

    with pytest.raises(CorlError, match="the engine broke"):
        train(cfg, progress=False, prepare=prepare)
    rows = (out / "agents" / "qwen" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(r)["step"] for r in rows] == [0]


def test_a_text_only_agent_is_validated_on_the_pictures_described_in_words(tmp_path):
    out = tmp_path / "run"
    cfg = load_config(
        TINY_COHORT,
        [
            *TINY,
            "agents.internvl.model=tiny-qwen2.5",
            "train.max_steps=1",
            f"train.output_dir={out}",
            "train.report_to=[none]",
            "eval.every=1",
            "eval.split=test",
            "eval.limit=2",
            "eval.max_new_tokens=2",
        ],
    )
    run = train(cfg, progress=False)
    assert {"eval/parsed_frac", "eval/peer_agreement"} <= set(run.evals[-1]["internvl"])
