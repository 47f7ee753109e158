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
    (strong_q,), (strong_i,) = config["warm_start"]["skill_sets"]
    assert config["warm_start"]["text_view"] is False  # the main job shows the models pictures
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


def test_demo_and_toy_share_the_warm_start_recipe():
    from corl_vl.cli.demo import DEFAULT_CONFIG
    from corl_vl.paths import project_root

    root = project_root()
    demo = yaml.safe_load((root / DEFAULT_CONFIG).read_text())
    toy = yaml.safe_load((root / "configs/science/toy.yaml").read_text())
    assert demo["warm_start"] == toy["warm_start"]
    assert demo["cohort"]["agents"] == toy["cohort"]["agents"]
