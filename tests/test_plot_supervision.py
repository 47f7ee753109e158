"""``corl-vl plot`` draws the labels' accuracy next to the reward where the problems have golds."""

from __future__ import annotations

import json

from corl_vl.train.reporting import plot_run


def _metrics(run_dir, agent, rows):
    path = run_dir / "agents" / agent / "metrics.jsonl"
    path.parent.mkdir(parents=True)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))


def test_label_accuracy_and_reward_panel_where_golds_exist(tmp_path):
    with_golds = tmp_path / "golds"
    for agent in ("a", "b"):
        _metrics(
            with_golds, agent, [{"step": s, "reward/mean": 0.1 * s, "label/accuracy": 0.5} for s in range(3)]
        )
    assert with_golds / "plots" / "label_accuracy_and_reward.png" in plot_run(with_golds)

    label_free = tmp_path / "no-golds"
    _metrics(label_free, "a", [{"step": s, "reward/mean": 0.1 * s} for s in range(3)])
    written = plot_run(label_free)
    assert label_free / "plots" / "reward_mean.png" in written
    assert not (label_free / "plots" / "label_accuracy_and_reward.png").exists()
