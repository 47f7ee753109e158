"""Run bookkeeping controls: ``train.save_total_limit`` (never the best or the latest checkpoint) and
``eval.at_start``."""

from __future__ import annotations

import json
import os

from test_cohort import TINY, TINY_COHORT, ForcedTexts, boxed

from corl_vl.config import load_config
from corl_vl.recipe import train
from corl_vl.train.checkpoint import CHECKPOINTS, latest_checkpoint, prune_checkpoints


def _fake_checkpoints(root, steps):
    for step in steps:
        folder = root / CHECKPOINTS / f"step-{step:06d}"
        folder.mkdir(parents=True)
        (folder / "meta.json").write_text(json.dumps({"step": step, "agents": ["a"]}))


def test_prune_keeps_the_newest_and_never_best_or_latest(tmp_path):
    _fake_checkpoints(tmp_path, [1, 2, 3, 4, 5])
    root = tmp_path / CHECKPOINTS
    (root / "best").write_text("step-000001")
    os.symlink("step-000003", root / "latest", target_is_directory=True)  # e.g. a resume from step 3
    removed = prune_checkpoints(tmp_path, 1)
    assert sorted(p.name for p in removed) == ["step-000002", "step-000004"]
    assert sorted(p.name for p in root.glob("step-*")) == ["step-000001", "step-000003", "step-000005"]
    assert latest_checkpoint(tmp_path).name == "step-000003"


def test_prune_with_no_limit_keeps_everything(tmp_path):
    _fake_checkpoints(tmp_path, [1, 2])
    assert prune_checkpoints(tmp_path, 0) == []
    assert len(list((tmp_path / CHECKPOINTS).glob("step-*"))) == 2


def test_a_run_keeps_its_last_checkpoints_and_validates_at_start(tmp_path):
    out = tmp_path / "run"
    overrides = [
        *TINY,
        "train.max_steps=3",
        "train.save_every=1",
        "train.save_total_limit=1",
        f"train.output_dir={out}",
        "train.report_to=[none]",
        "eval.at_start=true",
        "eval.source=synthetic",
        "eval.split=test",
        "eval.limit=2",
        "eval.max_new_tokens=2",
    ]
    cfg = load_config(TINY_COHORT, overrides)

    def prepare(cohort):
        for agent in cohort.agents:
            agent.engine = ForcedTexts(agent.engine, boxed(1, 1, 1, 2))

    run = train(cfg, progress=False, prepare=prepare)
    assert [p.name for p in (out / CHECKPOINTS).glob("step-*")] == ["step-000003"]
    assert latest_checkpoint(out).name == "step-000003"
    # before the first step, and after the last (eval.every=0)
    assert [e["step"] for e in run.evals] == [0, 3]
