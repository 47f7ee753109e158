"""The one training loop and its callbacks: hook order, stop requests, periodic validation with best-checkpoint
selection, metric sinks."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from test_cohort import TINY, TINY_COHORT, ForcedTexts, boxed

from corl_vl.config import config_from_dict, load_config
from corl_vl.errors import CorlError
from corl_vl.recipe import train
from corl_vl.train.callbacks import MetricsLog
from corl_vl.train.loop import Callback, TrainingRun, fit


class CountingCohort:
    """The loop's view of a cohort: ``step()`` returns ``{agent: metrics}`` (no model involved)."""

    def __init__(self, max_steps: int) -> None:
        self.cfg = SimpleNamespace(train=SimpleNamespace(max_steps=max_steps))
        self.agents = [SimpleNamespace(name="a"), SimpleNamespace(name="b")]
        self.step_index = 0

    def step(self) -> dict[str, dict[str, float]]:
        self.step_index += 1
        return {"a": {"reward/mean": 0.1 * self.step_index}, "b": {"reward/mean": 0.0}}


class Recorder(Callback):
    def __init__(self, name: str, log: list[str], stop_after: int | None = None) -> None:
        self.name, self.log, self.stop_after = name, log, stop_after

    def on_fit_start(self, run: TrainingRun) -> None:
        self.log.append(f"{self.name}:start@{run.completed}")

    def on_step_end(self, run: TrainingRun) -> None:
        self.log.append(f"{self.name}:step{run.step_index}")
        if self.stop_after is not None and run.completed == self.stop_after:
            run.request_stop("enough")

    def on_fit_end(self, run: TrainingRun) -> None:
        self.log.append(f"{self.name}:end@{run.completed}")

    def close(self, run: TrainingRun) -> None:
        self.log.append(f"{self.name}:close")


def test_hooks_run_in_order_and_history_keeps_every_step():
    log: list[str] = []
    run = fit(CountingCohort(2), [Recorder("x", log), Recorder("y", log)])
    assert log == [
        "x:start@0",
        "y:start@0",
        "x:step0",
        "y:step0",
        "x:step1",
        "y:step1",
        "x:end@2",
        "y:end@2",
        "y:close",
        "x:close",
    ]
    assert run.completed == 2 and [row["step"] for row in run.history["a"]] == [0, 1]
    assert run.history["a"][1]["reward/mean"] == pytest.approx(0.2)


def test_a_stop_request_ends_after_the_step_and_still_runs_on_fit_end():
    log: list[str] = []
    run = fit(CountingCohort(10), [Recorder("x", log, stop_after=3)])
    assert run.completed == 3 and run.stop_reason == "enough"
    assert log[-2:] == ["x:end@3", "x:close"]


def test_close_runs_when_a_step_fails():
    class Failing(CountingCohort):
        def step(self):
            raise RuntimeError("boom")

    log: list[str] = []
    with pytest.raises(RuntimeError):
        fit(Failing(2), [Recorder("x", log)])
    assert log == ["x:start@0", "x:close"]


def test_resume_starts_at_the_given_step():
    run = fit(CountingCohort(4), [], start_step=3)
    assert run.start_step == 3 and run.completed == 4 and [r["step"] for r in run.history["a"]] == [3]


def test_report_to_wandb_logs_offline_or_says_how_to_install(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    log = MetricsLog(tmp_path, ["a", "b"], ["wandb"])
    cohort = CountingCohort(1)
    cohort.cfg = config_from_dict({"agents": [{"name": "a", "model": "m"}, {"name": "b", "model": "n"}]})
    try:
        import wandb  # noqa: F401  (optional dependency)
    except ImportError:
        with pytest.raises(CorlError, match="pip install wandb"):
            fit(cohort, [log], max_steps=1)
        return
    fit(cohort, [log], max_steps=1)
    assert list((tmp_path / "wandb").glob("offline-run-*"))
    assert (tmp_path / "agents" / "a" / "metrics.jsonl").exists()


def test_unknown_metric_sink_is_refused():
    with pytest.raises(CorlError, match="report_to"):
        config_from_dict(
            {
                "agents": [{"name": "a", "model": "m"}, {"name": "b", "model": "n"}],
                "train": {"report_to": ["mlflow"]},
            }
        )


def test_periodic_validation_goes_to_metrics_and_keeps_the_best_checkpoint(tmp_path):
    out = tmp_path / "run"
    overrides = [
        *TINY,
        "train.max_steps=2",
        f"train.output_dir={out}",
        "train.report_to=[none]",
        "eval.every=1",
        "eval.source=synthetic",
        "eval.split=test",
        "eval.limit=2",
        "eval.max_new_tokens=4",
        "eval.select_best=peer_agreement",
    ]
    cfg = load_config(TINY_COHORT, overrides)

    def prepare(cohort):
        for agent in cohort.agents:
            agent.engine = ForcedTexts(agent.engine, boxed(1, 1, 1, 2))

    train(cfg, progress=False, prepare=prepare)
    rows = [json.loads(line) for line in (out / "agents" / "qwen" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1]
    assert all({"eval/parsed_frac", "eval/peer_agreement", "eval/accuracy"} <= r.keys() for r in rows)
    best = json.loads((out / "checkpoints" / "best.json").read_text())
    assert best["criterion"] == "peer_agreement" and best["step"] == 1  # the first evaluation sets the bar
    assert (out / "checkpoints" / best["checkpoint"] / "meta.json").exists()
    assert (out / "checkpoints" / "best").read_text() == best["checkpoint"]
    assert not (out / "tensorboard").exists()  # report_to: [none] → metrics.jsonl only
