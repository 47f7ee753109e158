"""`corl-vl train` runs the memory plan first when it trains on GPUs: one line naming the shortfall and the first
fix when the run does not fit, before any model loads; `--skip-plan` overrides; nothing to plan on a CPU.

The GPU count and memory are injected; `build_cohort` and the start of one process per agent (``os.execv`` of
torch's launcher, which a GPU run takes) are replaced by a stop, so reaching either means the plan let the run
through (and no model loaded before a refusal)."""

from __future__ import annotations

import logging

import pytest
import yaml

import corl_vl.cli.train as train_cli
import corl_vl.recipe
from corl_vl.cli import main
from corl_vl.errors import CorlError

REACHED = "build_cohort reached"


@pytest.fixture
def config(tmp_path, monkeypatch):
    def stop(*args, **kwargs):
        raise CorlError(REACHED)

    monkeypatch.setattr(corl_vl.recipe, "build_cohort", stop)
    monkeypatch.setattr(train_cli.os, "execv", stop)
    path = tmp_path / "pair.yaml"
    raw = {
        "agents": [{"name": "a", "model": "tiny-qwen2.5"}, {"name": "b", "model": "tiny-qwen3"}],
        "data": {"limit": 4, "problems_per_step": 2},
        "grpo": {"k": 2, "max_new_tokens": 4},
        "rollout": {"engine": "hf"},
        "train": {"output_dir": str(tmp_path / "run"), "plot": False},
    }
    path.write_text(yaml.safe_dump(raw))
    return path


def _gpus(monkeypatch, count: int, gib: float) -> None:
    monkeypatch.setattr(train_cli, "_visible_gpus", lambda: count)
    monkeypatch.setattr(train_cli, "_gpu_memory", lambda: int(gib * 2**30))


def test_a_run_that_does_not_fit_is_refused_in_one_line_before_any_model(config, monkeypatch, capsys):
    _gpus(monkeypatch, 1, 0.1)
    assert main(["train", "--config", str(config)]) == 2
    err = capsys.readouterr().err.strip()
    assert REACHED not in err and len(err.splitlines()) == 1
    assert "memory plan: the run does not fit on 1 × 0.1 GiB GPU(s): short by" in err
    assert "on GPU 0; first fix: " in err and "--skip-plan trains anyway" in err


def test_skip_plan_trains_anyway(config, monkeypatch, capsys):
    _gpus(monkeypatch, 1, 0.1)
    assert main(["train", "--config", str(config), "--skip-plan"]) == 2
    assert REACHED in capsys.readouterr().err


def test_a_run_that_fits_goes_on_and_says_so(config, monkeypatch, capsys, caplog):
    _gpus(monkeypatch, 2, 80)
    with caplog.at_level(logging.INFO, logger="corl_vl"):
        assert main(["train", "--config", str(config)]) == 2
    assert REACHED in capsys.readouterr().err
    assert any("memory plan: fits" in r.getMessage() for r in caplog.records)


def test_nothing_to_plan_on_a_cpu(config, monkeypatch, capsys):
    _gpus(monkeypatch, 0, 0)
    monkeypatch.setattr(train_cli, "_gpu_memory", lambda: pytest.fail("no GPU memory to read on a CPU"))
    assert main(["train", "--config", str(config)]) == 2
    assert REACHED in capsys.readouterr().err
