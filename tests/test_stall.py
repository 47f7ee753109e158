"""A run whose supervision is gone warns after train.stall_steps dead steps and stops after twice that."""

from __future__ import annotations

import pytest

from corl_vl.config import config_from_dict
from corl_vl.errors import CorlError
from corl_vl.train.stall import StallMonitor


def _step(coverage, parsed):
    return {"a": {"label/coverage": coverage, "answer/parsed_frac": parsed}, "b": {"answer/parsed_frac": 0.5}}


def test_warns_after_stall_steps_and_stops_after_twice_that(capsys):
    monitor = StallMonitor(3)
    assert [monitor.observe(_step(0.0, 0.4)) for _ in range(2)] == [None, None]
    status = monitor.observe(_step(0.0, 0.4))
    assert status == "stall: a label/coverage=0 for 3 steps"
    assert "a: label/coverage has been 0 for 3 steps" in capsys.readouterr().err
    assert monitor.stop_reason is None
    for _ in range(3):
        monitor.observe(_step(0.0, 0.4))
    assert "agent a's label/coverage has been 0 for 6 steps" in monitor.stop_reason
    with pytest.raises(CorlError, match=r"train\.stall_steps=0 turns this check off"):
        monitor.check()


def test_a_non_zero_step_restarts_the_count_and_zero_turns_it_off():
    monitor = StallMonitor(2)
    for coverage in (0.0, 0.0, 0.5, 0.0):
        status = monitor.observe(_step(coverage, 0.3))
    assert status is None and monitor.streaks[("a", "label/coverage")] == 1
    off = StallMonitor(0)
    for _ in range(50):
        assert off.observe(_step(0.0, 0.0)) is None
    assert off.stop_reason is None
    with pytest.raises(CorlError, match="stall_steps must be >= 0"):
        StallMonitor(-1)


def test_a_real_run_that_never_parses_an_answer_stops_with_a_clear_error(tmp_path, capsys):
    """A tiny random model writes no parseable answer: the training loop stops after 2 × stall_steps."""
    from corl_vl.recipe import train

    cfg = config_from_dict(
        {
            "agents": [{"name": "solo", "model": "tiny-qwen2.5"}],
            "data": {"limit": 2, "problems_per_step": 1},
            "grpo": {"k": 2, "max_new_tokens": 3},
            "train": {
                "reward": "rent",
                "max_steps": 10,
                "stall_steps": 2,
                "plot": False,
                "warmup_ratio": 0,
                "output_dir": str(tmp_path / "run"),
            },
        }
    )
    with pytest.raises(CorlError, match="agent solo's answer/parsed_frac has been 0 for 4 steps"):
        train(cfg, progress=False)
    assert "solo: answer/parsed_frac has been 0 for 2 steps" in capsys.readouterr().err
    lines = (tmp_path / "run" / "agents" / "solo" / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == 4  # the stopping step is still recorded


def test_the_stall_reason_reaches_the_progress_bar_status():
    from corl_vl.train.callbacks import StallDetection
    from corl_vl.train.loop import TrainingRun

    detection = StallDetection(2)
    run = TrainingRun(cohort=None, max_steps=10)
    for _ in range(2):
        run.metrics = _step(0.0, 0.3)
        detection.on_step_end(run)
    assert run.status == "stall: a label/coverage=0 for 2 steps"
