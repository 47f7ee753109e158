"""The experiment wraps the recipe: the trainer core never reads ``cfg.experiment``, and the synthetic-or-file
dispatch is one function in ``corl_vl.data.sources`` that the experiment narrows to its skills and view."""

from __future__ import annotations

import ast
from pathlib import Path

from corl_vl.data.sources import SyntheticScope, read_problems
from corl_vl.experiment import Experiment, demo_config, wrapper_for
from corl_vl.train.cohort_data import load_base_problems

TRAIN = Path(__file__).resolve().parents[1] / "corl_vl" / "train"


def test_the_trainer_core_never_reads_the_experiment_section():
    readers = []
    for path in sorted(TRAIN.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr == "experiment":
                readers.append(f"{path.name}:{node.lineno}")
    assert readers == []


def test_the_experiment_narrows_the_training_problems_to_its_skills_in_its_view():
    cfg = demo_config(["experiment.warm_start.text_view=true", "data.limit=12"])
    wrapper = wrapper_for(cfg)
    assert isinstance(wrapper, Experiment)
    problems = load_base_problems(cfg.data, wrapper.scope)
    assert len(problems) == 12
    assert {p.meta["skill"] for p in problems} == set(cfg.experiment.skills)
    assert not any(p.images for p in problems)  # the text view
    plain = load_base_problems(cfg.data)  # without the wrapper: the default skills, as pictures
    assert {p.meta["skill"] for p in plain} != set(cfg.experiment.skills) and all(p.images for p in plain)


def test_a_config_without_an_experiment_has_no_wrapper():
    cfg = demo_config()
    cfg.experiment = None
    assert wrapper_for(cfg) is None


def test_synthetic_scope_reaches_generation_and_a_file_source_ignores_it(tmp_path):
    scope = SyntheticScope(("figure_color",), text_view=False)
    problems = read_problems("synthetic", "test", limit=None, seed=0, synthetic_n=5, scope=scope)
    assert len(problems) == 5 and {p.meta["skill"] for p in problems} == {"figure_color"}
    rows = tmp_path / "p.jsonl"
    rows.write_text('{"id": "a", "question": "1+1?", "answer": "2"}\n')
    assert [
        p.id for p in read_problems(str(rows), "train", limit=None, seed=0, synthetic_n=5, scope=scope)
    ] == ["a"]
