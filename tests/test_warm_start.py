"""Supervised warm start on tiny real models: the loss falls, labels steer per-skill accuracy, the cache holds.

Kept small (a text model, 80 steps) so it runs in well under a minute on one CPU thread; the science
(real levels, real RL) lives in benchmarks/science/.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from pathlib import Path

import pytest

from corl_vl.errors import CorlError
from corl_vl.eval.greedy import heldout_accuracy, heldout_problems
from corl_vl.science.warm_start import (
    WarmStartSpec,
    complementary_specs,
    ensure_warm_start,
    labelled_pool,
    train_warm_start,
    warm_start_record,
)


def test_pool_respects_label_availability():
    spec = WarmStartSpec(
        model="tiny-qwen2.5",
        strong_skills=("read_chart",),
        weak_skills=("compare_bars",),
        labels_per_skill=40,
        weak_fraction=0.1,
    )
    pool = labelled_pool(spec)
    skills = [p.meta["skill"] for p in pool]
    assert skills.count("read_chart") == 40 and skills.count("compare_bars") == 4
    assert all(p.images for p in pool)  # pictures by default (VLM first)
    text = labelled_pool(dataclasses.replace(spec, text_view=True))  # the text ablation, on request
    assert all(not p.images for p in text) and [p.id for p in text] == [p.id for p in pool]
    assert [p.id for p in labelled_pool(spec)] == [p.id for p in pool]  # deterministic by seed
    with pytest.raises(CorlError, match="both strong and weak"):
        labelled_pool(WarmStartSpec(model="m", strong_skills=("read_chart",), weak_skills=("read_chart",)))


def test_pool_replaces_a_share_of_weak_labels_by_the_systematic_mistake():
    from corl_vl.data.synth import get_skill

    spec = WarmStartSpec(
        model="m",
        strong_skills=("shape_sides",),
        weak_skills=("shape_color",),
        labels_per_skill=200,
        weak_fraction=1.0,
        weak_error_rate=0.6,
    )
    pool = labelled_pool(spec)
    for p in pool:
        gold = (
            p.meta["params"]["color"] if p.meta["skill"] == "shape_color" else str(p.meta["params"]["sides"])
        )
        wrong = get_skill(p.meta["skill"]).mistake(p.meta["params"])
        assert p.answer == (wrong if p.meta["label"] == "mistake" else gold), p.id
    mistakes = Counter(p.meta["skill"] for p in pool if p.meta["label"] == "mistake")
    assert (
        mistakes["shape_sides"] == 0 and 0.5 < mistakes["shape_color"] / 200 < 0.7
    )  # strong labels stay gold
    with pytest.raises(CorlError, match="no systematic mistake rule"):
        labelled_pool(
            WarmStartSpec(
                model="m",
                strong_skills=("shape_color",),
                weak_skills=("read_chart",),
                labels_per_skill=4,
                weak_error_rate=0.5,
            )
        )


def test_complementary_specs_swap_strong_and_weak():
    a, b = complementary_specs(["m0", "m1"], [["shape_color"], ["shape_sides"]], weak_error_rate=0.6)
    assert (a.model, a.strong_skills, a.weak_skills) == ("m0", ("shape_color",), ("shape_sides",))
    assert (b.model, b.strong_skills, b.weak_skills) == ("m1", ("shape_sides",), ("shape_color",))
    assert a.weak_error_rate == b.weak_error_rate == 0.6 and a.key() != b.key()
    with pytest.raises(CorlError, match="2 models but 1 skill sets"):
        complementary_specs(["m0", "m1"], [["shape_color"]])


@pytest.mark.slow  # > 20 s on the 2-core CI machine
def test_warm_start_learns_the_strong_skill_and_the_systematic_mistake(tiny_checkpoint):
    """Weak-skill labels that mostly follow the skill's mistake rule make that mistake the model's answer there
    (never the right one), while the strong skill is learned: the warm start moves each skill the intended way."""
    from corl_vl.data.synth import get_skill

    base = str(tiny_checkpoint("tiny-qwen2.5"))
    spec = WarmStartSpec(
        model=base,
        strong_skills=("shape_sides",),
        weak_skills=("shape_color",),
        labels_per_skill=96,
        weak_fraction=1.0,
        weak_error_rate=0.8,
        steps=80,
        lr=2e-3,
        text_view=True,  # a text model reads the pictures described in words
    )
    adapter, model, record = train_warm_start(spec)
    assert record["last_loss"] < 0.2 * record["first_loss"], record["losses"]
    assert record["mistaken_labels"]["shape_color"] > 60 and "shape_sides" not in record["mistaken_labels"]
    test = heldout_problems(24, ["shape_sides", "shape_color"], seed=0, text_view=True)
    result = heldout_accuracy(adapter, model, test, max_new_tokens=8)
    assert result.parsed > 0.9  # it learned the \boxed{} format
    colors = [p for p in test if p.meta["skill"] == "shape_color"]
    wrong = sum(result.answers[p.id] == get_skill("shape_color").mistake(p.meta["params"]) for p in colors)
    assert wrong / len(colors) > max(0.3, result.per_skill["shape_color"]), (wrong, result.per_skill)
    assert result.per_skill["shape_sides"] > 0.6 > result.per_skill["shape_color"], result.per_skill


def test_cache_is_built_once(tmp_path, monkeypatch, tiny_checkpoint):
    base = str(tiny_checkpoint("tiny-qwen2.5"))
    monkeypatch.setenv("CORL_VL_CACHE", str(tmp_path))  # a fresh cache: the build must happen here
    spec = WarmStartSpec(
        model=base, strong_skills=("read_chart",), labels_per_skill=8, steps=2, text_view=True
    )
    path = ensure_warm_start(spec)
    assert path.parent == tmp_path / "warm_start" and path.name == spec.key()
    stamp = (path / "warm_start.json").stat().st_mtime_ns
    assert ensure_warm_start(spec) == path
    assert (path / "warm_start.json").stat().st_mtime_ns == stamp  # not rebuilt
    assert warm_start_record(path)["labels_per_skill"] == {"read_chart": 8}
    from model_adapters.registry import create_adapter

    adapter = create_adapter(str(path))  # a normal checkpoint folder the cohort can load
    assert adapter.load_model() is not None


def test_a_text_model_warm_starts_on_the_text_rendering_whatever_the_view(tiny_checkpoint):
    """Pictures are the default view; a text-only model reads them described in words (as in training)."""
    spec = WarmStartSpec(
        model=str(tiny_checkpoint("tiny-qwen2.5")), strong_skills=("read_chart",), labels_per_skill=4, steps=1
    )
    assert spec.text_view is False and all(p.images for p in labelled_pool(spec))
    _, _, record = train_warm_start(spec)
    assert record["labels_per_skill"] == {"read_chart": 4}


def test_init_seed_starts_from_another_random_network_of_the_same_preset():
    """Warm-start seeds differ in their starting weights too (so a seed spread covers the bases' init)."""
    import torch

    from corl_vl.science.warm_start import _initial_adapter

    a = _initial_adapter(WarmStartSpec(model="tiny-qwen2.5", strong_skills=("read_chart",)))
    b = _initial_adapter(WarmStartSpec(model="tiny-qwen2.5", strong_skills=("read_chart",), init_seed=1))
    assert type(a) is type(b) and a.tokenizer.get_vocab() == b.tokenizer.get_vocab()
    wa, wb = (dict(x.load_model().named_parameters()) for x in (a, b))
    assert wa.keys() == wb.keys()
    assert not all(torch.equal(wa[k], wb[k]) for k in wa)
    spec = WarmStartSpec(model="tiny-qwen2.5", strong_skills=("read_chart",))
    assert spec.key() != WarmStartSpec(model="tiny-qwen2.5", strong_skills=("read_chart",), init_seed=1).key()


def test_per_skill_error_rates_set_one_weak_skill_apart_and_keep_the_old_keys():
    """``weak_error_rates`` overrides the common rate for the skills it names; empty, it leaves the cache key
    exactly as before the field existed (the demo's cached bases stay valid)."""
    import hashlib
    import json

    from corl_vl.science.warm_start import VERSION

    base = WarmStartSpec(
        model="m",
        strong_skills=("shape_sides",),
        weak_skills=("figure_color", "shape_color"),
        labels_per_skill=200,
        weak_fraction=1.0,
        weak_error_rate=0.6,
    )
    old = {k: v for k, v in dataclasses.asdict(base).items() if k != "weak_error_rates"} | {
        "version": VERSION
    }
    digest = hashlib.sha256(json.dumps(old, sort_keys=True, default=list).encode()).hexdigest()[:12]
    assert base.key() == f"m-{digest}"
    spec = dataclasses.replace(base, weak_error_rates={"shape_color": 0.1})
    assert spec.key() != base.key()
    assert spec.key() != dataclasses.replace(base, weak_error_rates={"shape_color": 0.9}).key()
    share = {
        skill: sum(p.meta["label"] == "mistake" for p in pool if p.meta["skill"] == skill) / 200
        for pool in [labelled_pool(spec)]
        for skill in ("figure_color", "shape_color")
    }
    assert 0.5 < share["figure_color"] < 0.7 and share["shape_color"] < 0.2
    everything = labelled_pool(
        dataclasses.replace(base, weak_error_rates={"shape_color": 1.0, "shape_sides": 1})
    )
    assert all(p.meta["label"] == "mistake" for p in everything if p.meta["skill"] == "shape_color")
    assert all(p.meta["label"] == "gold" for p in everything if p.meta["skill"] == "shape_sides")  # strong


@pytest.mark.parametrize(
    ("rates", "message"),
    [
        ({"shape_color": 1.5}, r"weak_error_rates.shape_color must be a share in \[0, 1\], got 1.5"),
        ({"shape_color": float("nan")}, "weak_error_rates.shape_color must be a share"),
        ({"shape_color": "half"}, "weak_error_rates.shape_color must be a share"),
        ({"figure_color": 0.2}, "names 'figure_color', which is not one of the skills"),
        ([0.2], "weak_error_rates must map a skill"),
    ],
)
def test_bad_per_skill_error_rates_are_refused_in_one_line(rates, message):
    spec = WarmStartSpec(
        model="m", strong_skills=("shape_sides",), weak_skills=("shape_color",), weak_error_rates=rates
    )
    with pytest.raises(CorlError, match=message) as err:
        labelled_pool(spec)
    assert "\n" not in str(err.value)


def test_a_contested_skill_is_weak_for_every_agent_at_each_agents_own_rate():
    from corl_vl.config import load_config
    from corl_vl.experiment import demo_config, warm_start_specs

    demo_keys = [s.key() for s in warm_start_specs(demo_config())]
    cfg = demo_config(["experiment.warm_start.contested_skills=[shape_color]"])
    assert cfg.experiment.skills == ["figure_color", "ground_color", "shape_color"]
    names = cfg.agent_names()
    cfg.experiment.agents = {names[0]: {"weak_error_rates": {"shape_color": 0.2}}}
    a, b = warm_start_specs(cfg)
    assert (a.strong_skills, a.weak_skills) == (("figure_color",), ("ground_color", "shape_color"))
    assert (b.strong_skills, b.weak_skills) == (("ground_color",), ("figure_color", "shape_color"))
    assert a.weak_error_rates == {"shape_color": 0.2} and b.weak_error_rates == {}
    assert a.weak_error_rate == b.weak_error_rate == 0.6  # the demo's weak skills keep the demo's rate
    assert b.key() != demo_keys[1]  # another pool (a third skill), another base
    toy = Path(__file__).resolve().parents[1] / "configs/science/toy.yaml"
    for override, message in [
        ("experiment.warm_start.contested_skills=[figure_color]", "figure_color is also an agent's strong"),
        ("experiment.warm_start.contested_skills=shape_color", "contested_skills: must be a list"),
        ("experiment.warm_start.weak_error_rates={shape_color: 2}", "weak_error_rates: must map skills"),
    ]:
        with pytest.raises(CorlError, match=message) as err:
            load_config(toy, [override])
        assert "\n" not in str(err.value)
