"""Supervised warm start on tiny real models: the loss falls, labels steer per-skill accuracy, the cache holds.

Kept small (a text model, a few dozen steps) so it runs in well under a minute on one CPU thread; the science
(real levels, real RL) lives in benchmarks/science/.
"""

from __future__ import annotations

import pytest

from corl_vl.errors import CorlError
from corl_vl.heldout import evaluate, heldout_problems
from corl_vl.warm_start import (
    WarmStartSpec,
    complementary_specs,
    ensure_warm_start,
    labelled_pool,
    train_warm_start,
    warm_start_record,
)

# compare_bars (multiple choice) and read_chart (free form) have disjoint answer sets: a model warm-started only
# on one of them answers the other in the wrong vocabulary, so "strong" vs "absent" is a sharp, fast contrast.
SPEC = dict(labels_per_skill=96, steps=40, batch_size=16, lr=2e-3, weak_fraction=0.0, seed=0)


def test_pool_respects_label_availability():
    spec = WarmStartSpec(model="tiny-qwen2.5", strong_skills=("read_chart",), weak_skills=("compare_bars",),
                         labels_per_skill=40, weak_fraction=0.1)  # fmt: skip
    pool = labelled_pool(spec)
    skills = [p.meta["skill"] for p in pool]
    assert skills.count("read_chart") == 40 and skills.count("compare_bars") == 4
    assert all(not p.images for p in pool)  # text view by default
    assert [p.id for p in labelled_pool(spec)] == [p.id for p in pool]  # deterministic by seed
    with pytest.raises(CorlError, match="both strong and weak"):
        labelled_pool(WarmStartSpec(model="m", strong_skills=("read_chart",), weak_skills=("read_chart",)))


def test_warm_start_lowers_loss_and_steers_skills(tiny_checkpoint):
    base = str(tiny_checkpoint("tiny-qwen2.5"))
    a, b = complementary_specs([base, base], [["compare_bars"], ["read_chart"]], **SPEC)
    assert a.strong_skills == ("compare_bars",) and a.weak_skills == ("read_chart",)
    assert a.key() != b.key()
    test = heldout_problems(12, ["compare_bars", "read_chart"], seed=0)
    results = {}
    for spec in (a, b):
        adapter, model, record = train_warm_start(spec)
        assert record["last_loss"] < 0.5 * record["first_loss"], record["losses"]
        results[spec.strong_skills[0]] = evaluate(adapter, model, test, max_new_tokens=8)
    bars_a, chart_a = (results["compare_bars"].per_skill[s] for s in ("compare_bars", "read_chart"))
    bars_b, chart_b = (results["read_chart"].per_skill[s] for s in ("compare_bars", "read_chart"))
    # each model answers its own skill better than the model that never saw labels for it
    assert bars_a > bars_b and chart_b > chart_a, (results["compare_bars"], results["read_chart"])
    assert results["compare_bars"].parsed > 0.9  # it learned the \boxed{} format


def test_cache_is_built_once(tmp_path, monkeypatch, tiny_checkpoint):
    base = str(tiny_checkpoint("tiny-qwen2.5"))
    monkeypatch.setenv("CORL_VL_CACHE", str(tmp_path))  # a fresh cache: the build must happen here
    spec = WarmStartSpec(model=base, strong_skills=("read_chart",), labels_per_skill=8, steps=2)
    path = ensure_warm_start(spec)
    assert path.parent == tmp_path / "warm_start" and path.name == spec.key()
    stamp = (path / "warm_start.json").stat().st_mtime_ns
    assert ensure_warm_start(spec) == path
    assert (path / "warm_start.json").stat().st_mtime_ns == stamp  # not rebuilt
    assert warm_start_record(path)["labels_per_skill"] == {"read_chart": 8}
    from model_adapters.registry import create_adapter

    adapter = create_adapter(str(path))  # a normal checkpoint folder the cohort can load
    assert adapter.load_model() is not None
