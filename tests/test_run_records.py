"""A run's record and its resume: a run with ``reward.combine`` resumes with its own settings, a resume from
another working directory trains on the problems the run recorded, a refused resume leaves the run folder as it
was, and the first-step "nothing trained" warning only comes when nothing trained."""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
from pathlib import Path

import pytest
import yaml
from test_cohort import TINY, TINY_COHORT

from corl_vl.config import load_config
from corl_vl.errors import CorlError
from corl_vl.recipe import train
from corl_vl.train.loop import TrainingRun
from corl_vl.train.progress import FirstStepCheck
from corl_vl.train.resume_check import differences
from corl_vl.train.run_lock import release_run_locks

REWARD_FILE: list[Path] = []  # set by first_run: one file, so its reward registers once per session
# rewards by position: every group's rewards differ, so rows train although random tiny models parse nothing
POSITION_REWARD = """
from corl_vl.rewards.registry import StepRewards


def by_position(inputs):
    return StepRewards({name: {pid: [float(j % 2) for j in range(len(inputs.completions[name][pid]))]
                               for pid in inputs.mine} for name in inputs.local}, {})
"""


def _project(folder: Path, prefix: str) -> Path:
    """A working directory with its own problems.jsonl (ids ``prefix-i``)."""
    folder.mkdir()
    rows = [{"id": f"{prefix}-{i}", "question": f"{i} + 1 = ?", "answer": str(i + 1)} for i in range(4)]
    (folder / "problems.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


def _config(run: Path, max_steps: int, *extra: str):
    """The settings of every run here (the reward file beside the first run: its path is absolute)."""
    overrides = [
        *TINY,
        "grpo.k=2",
        "grpo.max_new_tokens=4",
        "train.save_every=1",
        f"train.max_steps={max_steps}",
        f"train.output_dir={run}",
        "data.train=problems.jsonl",  # relative: read in the directory the run starts from
        f"reward.module={REWARD_FILE[0]}:by_position",
        "reward.combine=[{name: by_position, weight: 1}]",
        *extra,
    ]
    return load_config(TINY_COHORT, overrides)


def _snapshot(folder: Path) -> dict[str, tuple[str, int]]:
    return {
        str(p.relative_to(folder)): (hashlib.sha1(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns)
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


@pytest.fixture(scope="module")
def first_run(tmp_path_factory):
    """(run folder, project a, the first step's "nothing trained" warnings): 1 step from project ``a``."""
    root = tmp_path_factory.mktemp("runs")
    project = _project(root / "a", "a")
    run = root / "run"
    (root / "rewards.py").write_text(POSITION_REWARD)
    REWARD_FILE[:] = [root / "rewards.py"]
    logger = logging.getLogger("corl_vl")
    seen: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: seen.append(record.getMessage())  # type: ignore[method-assign]
    logger.addHandler(handler)
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(project)
        try:
            train(_config(run, 1), progress=False)
        finally:
            logger.removeHandler(handler)
            release_run_locks()  # as the CLI does when its command ends
    return run, project, [m for m in seen if "nothing trained" in m]


def test_a_step_that_trained_rows_gives_no_nothing_trained_warning(first_run):
    run, _, warnings = first_run
    rows = [json.loads(line) for line in (run / "agents" / "qwen" / "metrics.jsonl").read_text().splitlines()]
    assert rows[0]["answer/parsed_frac"] == 0 and rows[0]["trained_rows"] > 0
    assert warnings == []


def test_first_step_check_warns_only_when_nothing_learned(caplog):
    def warned(**metrics: float) -> bool:
        caplog.clear()
        run = TrainingRun(
            cohort=None, max_steps=2, completed=1, metrics={"a": dict(metrics), "b": dict(metrics)}
        )
        with caplog.at_level(logging.WARNING, logger="corl_vl"):
            FirstStepCheck().on_step_end(run)
        return any("nothing trained" in r.getMessage() for r in caplog.records)

    assert warned(**{"answer/parsed_frac": 0.0, "trained_rows": 0.0})
    assert warned(**{"answer/parsed_frac": 0.5, "label/coverage": 0.0, "trained_rows": 0.0})
    # grpo.beta > 0: rows of equal-reward groups train only the KL term, nothing from rewards
    assert warned(**{"answer/parsed_frac": 0.0, "trained_rows": 4.0, "groups/zero_std_frac": 1.0})
    assert not warned(**{"answer/parsed_frac": 0.0, "trained_rows": 4.0, "groups/zero_std_frac": 0.5})
    assert not warned(**{"answer/parsed_frac": 0.5, "label/coverage": 0.5, "trained_rows": 0.0})


def test_resume_from_another_directory_uses_the_recorded_problems(first_run, tmp_path, monkeypatch):
    run0, project, _ = first_run
    run = tmp_path / "run"
    shutil.copytree(run0, run, symlinks=True)
    recorded = yaml.safe_load((run / "config.yaml").read_text())
    assert recorded["data"]["train"] == str(project / "problems.jsonl")  # the record names the file
    monkeypatch.chdir(_project(tmp_path / "b", "b"))  # another problems.jsonl with other problems
    seen = {}
    # the same settings, reward.combine included, and one more step (max_steps is free: constant schedule)
    train(_config(run, 2), resume=True, progress=False, prepare=lambda c: seen.update(ids=sorted(c.base)))
    assert seen["ids"] == [f"a-{i}" for i in range(4)]
    (entry,) = yaml.safe_load((run / "config.yaml").read_text())["history"]
    assert set(entry["changed"]) == {
        "train.max_steps",
        "train.output_dir",
    }  # the copy's folder, one more step
    rows = (run / "agents" / "qwen" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in rows] == [0, 1]


def test_a_refused_resume_leaves_the_run_folder_as_it_was(first_run, tmp_path, monkeypatch):
    run0, project, _ = first_run
    run = tmp_path / "run"
    shutil.copytree(run0, run, symlinks=True)
    monkeypatch.chdir(project)
    before = _snapshot(run)
    with pytest.raises(CorlError, match=r"grpo\.k: 2 → 3"):  # refused by the settings check
        train(_config(run, 2, "grpo.k=3"), resume=True, progress=False)
    release_run_locks()  # as the CLI does when its command ends
    assert _snapshot(run) == before
    # an accepted change that the checkpoint then refuses (its weights are another model's)
    with pytest.raises(CorlError, match="weights do not match agent qwen"):
        train(
            _config(run, 2, "agents.0.model=tiny-internvl3.5"),
            resume=True,
            progress=False,
            allow_config_change=["agents.0.model"],
        )
    release_run_locks()
    assert _snapshot(run) == before


def test_empty_and_unset_lists_and_mappings_are_the_same_setting():
    saved = {
        "reward": {"combine": [{"name": "format", "weight": 0.5}], "edges": {}},
        "train": {"freeze": None},
    }
    current = {"reward": {"combine": [{"name": "format", "weight": 0.5}]}, "train": {"freeze": []}}
    defaults = {"reward": {"combine": [], "edges": {}}, "train": {"freeze": [], "report_to": ["tensorboard"]}}
    assert differences(saved, current, defaults) == {"train.report_to": (["tensorboard"], None)}
    assert differences({"reward": {"combine": []}}, {"reward": {}}, defaults) == {
        "train.report_to": (["tensorboard"], None)
    }
    changed = {"reward": {"combine": [{"name": "length", "weight": 0.5}]}}
    assert set(differences(saved, {**current, **changed}, defaults)) == {
        "reward.combine.0.name",
        "train.report_to",
    }
