"""``train.log_completions``: rows of what each agent wrote, with its answer, label, reward and advantage, in
completions.jsonl, TensorBoard and wandb (offline, for real)."""

from __future__ import annotations

import json

from test_cohort import TINY, TINY_COHORT, ForcedTexts, boxed

from corl_vl.config import load_config
from corl_vl.recipe import train


def _run(tmp_path, *extra):
    out = tmp_path / "run"
    cfg = load_config(
        TINY_COHORT,
        [*TINY, "train.max_steps=2", f"train.output_dir={out}", "train.log_completions=3", *extra],
    )
    seen = {}

    def prepare(cohort):
        qwen, internvl = cohort.agents
        qwen.engine = ForcedTexts(qwen.engine, boxed(3, 5, 5, 5))
        internvl.engine = ForcedTexts(internvl.engine, boxed(3, 3, 3, 5))
        seen["cohort"] = cohort

    train(cfg, progress=False, prepare=prepare)
    return out, seen["cohort"]


def test_completions_jsonl_rows_carry_answer_label_reward_and_advantage(tmp_path):
    out, cohort = _run(tmp_path, "train.report_to=[tensorboard]")
    rows = [
        json.loads(line) for line in (out / "agents" / "qwen" / "completions.jsonl").read_text().splitlines()
    ]
    assert [r["step"] for r in rows] == [0, 0, 0, 1, 1, 1]
    last = cohort.last[0]  # qwen's step 1
    pid = last.rollouts[0].problem_id
    for j, row in enumerate(rows[3:]):
        assert row["problem_id"] == pid and row["prompt"] == cohort.agents[0].view[pid].question[:200]
        assert row["completion"] == f"so the answer is \\boxed{{{[3, 5, 5, 5][j]}}}"
        assert row["answer"] == str([3, 5, 5, 5][j]) and row["label"] == "3"  # internvl's majority
        assert row["reward"] == [1.0, 0.0, 0.0][j] and row["advantage"] == last.advantages[j]
    assert rows[3]["advantage"] > 0 > rows[4]["advantage"]
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(out / "tensorboard" / "qwen"), size_guidance={"tensors": 0})
    events.Reload()
    assert any("completions" in tag for tag in events.Tags()["tensors"])


def test_wandb_offline_run_gets_metrics_and_completion_tables(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    out, _ = _run(tmp_path, "train.report_to=[wandb]")
    (run_dir,) = (out / "wandb").glob("offline-run-*")
    assert list(run_dir.glob("run-*.wandb"))  # the run's record: metrics go here
    tables = sorted(p.name for p in run_dir.rglob("*.table.json"))
    assert any(name.startswith("completions") for name in tables), tables
    table = json.loads(next(run_dir.rglob("*.table.json")).read_text())
    assert table["columns"][:4] == ["step", "problem_id", "prompt", "completion"] and len(table["data"]) == 3
