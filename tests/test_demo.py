"""``corl-vl demo --fast``: the main job's whole path (warm start → before → Co-RL → after) on a smoke budget."""

from __future__ import annotations

import json

from corl_vl.cli import main


def test_demo_fast_runs_end_to_end(tmp_path, capsys):
    out = tmp_path / "demo"
    assert main(["demo", "--fast", "--max-steps", "1", "--output-dir", str(out), "--no-progress"]) == 0
    printed = capsys.readouterr().out
    record = json.loads((out / "before_after.json").read_text())
    assert set(record["before"]) == set(record["after"]) == {"qwen", "internvl"}
    for when in ("before", "after"):
        for result in record[when].values():
            assert set(result["per_skill"]) == {"read_chart", "count_shapes"}
            assert 0.0 <= result["overall"] <= 1.0 and result["n"] == 16
    assert record["steps"] == 1
    assert (out / "plots" / "heldout_before_after.png").stat().st_size > 0
    assert (out / "agents" / "qwen" / "metrics.jsonl").read_text().count("\n") == 1  # one Co-RL step logged
    assert "read_chart (strong)" in printed and "count_shapes (weak)" in printed
