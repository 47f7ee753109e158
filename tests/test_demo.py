"""``corl-vl demo --fast``: the main job's whole path (warm start → before → Co-RL → after) on a smoke budget,
and the demo and the toy benchmark sharing one warm-start recipe (so they share cached bases)."""

from __future__ import annotations

import json

import yaml

from corl_vl.cli import main


def test_demo_fast_runs_end_to_end(tmp_path, capsys):
    from corl_vl.cli.demo import DEFAULT_CONFIG
    from corl_vl.paths import project_root

    config = yaml.safe_load((project_root() / DEFAULT_CONFIG).read_text())
    (strong_q,), (strong_i,) = config["experiment"]["warm_start"]["skill_sets"]
    assert config["experiment"]["warm_start"]["text_view"] is False  # the main job shows the models pictures
    out = tmp_path / "demo"
    assert main(["demo", "--fast", "--max-steps", "1", "--output-dir", str(out), "--no-progress"]) == 0
    printed = capsys.readouterr().out
    record = json.loads((out / "before_after.json").read_text())
    assert set(record["before"]) == set(record["after"]) == {"qwen", "internvl"}
    for when in ("before", "after"):
        for result in record[when].values():
            assert set(result["per_skill"]) == {strong_q, strong_i}
            assert 0.0 <= result["overall"] <= 1.0 and result["n"] == 16
    assert record["steps"] == 1
    assert (out / "plots" / "heldout_before_after.png").stat().st_size > 0
    assert (out / "agents" / "qwen" / "metrics.jsonl").read_text().count("\n") == 1  # one Co-RL step logged
    assert str(out / "plots" / "heldout_before_after.png") in printed
    assert f"{strong_q} (strong)" in printed and f"{strong_i} (weak)" in printed
    assert "problems are shown as pictures" in printed
    for skill in (strong_q, strong_i):  # one example picture per skill, for the README and the curious
        assert (out / "plots" / f"example_{skill}.png").stat().st_size > 0


def test_demo_toy_first_run_and_tiny_pair_share_the_warm_start_recipe():
    """``corl-vl demo``, the toy benchmark, ``train --config configs/demo.yaml``, ``corl_vl.demo_config()`` and
    ``--pair tiny-…`` start from the same warm-started bases (one cache entry)."""
    from corl_vl.cli.demo import DEFAULT_CONFIG
    from corl_vl.config import load_config, pair_config, to_dict
    from corl_vl.experiment import demo_config, tiny_pair_experiment, warm_start_specs
    from corl_vl.paths import project_root

    root = project_root()
    configs = [
        load_config(root / f) for f in (DEFAULT_CONFIG, "configs/science/toy.yaml", "configs/demo.yaml")
    ]
    configs.append(demo_config())
    configs.append(tiny_pair_experiment(pair_config(["tiny-qwen2.5-vl", "tiny-internvl3.5"])))
    keys = {tuple(spec.key() for spec in warm_start_specs(cfg)) for cfg in configs}
    assert len(keys) == 1
    assert to_dict(load_config(root / "configs/demo.yaml")) == to_dict(demo_config())
