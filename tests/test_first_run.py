"""A first run as a new user starts it: it trains, and says what it is doing (or why nothing trains)."""

from __future__ import annotations

import json
import logging

from test_cohort import TINY, TINY_COHORT

from corl_vl.cli import main
from corl_vl.config import load_config
from corl_vl.recipe import train


def test_tiny_pair_starts_from_warm_started_bases_and_trains(tmp_path, demo_bases, capsys):
    out = tmp_path / "pair"
    argv = [
        "train",
        "--pair",
        "tiny-qwen2.5-vl,tiny-internvl3.5",
        "--max-steps",
        "1",
        "--output-dir",
        str(out),
    ]
    settings = [
        "--set",
        "data.problems_per_step=4",
        "--set",
        "train.plot=false",
        "--set",
        "experiment.heldout.per_skill=4",
    ]
    assert main([*argv, *settings]) == 0
    err = capsys.readouterr().err
    assert "tiny presets start from warm-started bases" in err
    assert "step 1/1 |" in err  # output is not a terminal here: a plain line per step
    assert "held-out accuracy at step 0" in err and "held-out accuracy at step 1" in err
    record = json.loads((out / "heldout.json").read_text())
    assert [entry["step"] for entry in record] == [0, 1]
    for agent in ("tiny-qwen2.5-vl", "tiny-internvl3.5"):
        (row,) = [
            json.loads(line) for line in (out / "agents" / agent / "metrics.jsonl").read_text().splitlines()
        ]
        assert row["answer/parsed_frac"] > 0 and row["label/coverage"] > 0


def test_a_run_that_cannot_train_says_why_after_its_first_step(tmp_path, caplog):
    """Random tiny models parse no answer: one warning after step 1 names the cause and the way out."""
    cfg = load_config(
        TINY_COHORT, [*TINY, "train.max_steps=2", f"train.output_dir={tmp_path / 'run'}", "train.plot=false"]
    )
    with caplog.at_level(logging.WARNING, logger="corl_vl"):
        train(cfg, progress=False)
    warnings = [r.getMessage() for r in caplog.records if "nothing trained" in r.getMessage()]
    assert len(warnings) == 1
    assert "step 1: every agent parsed no answer" in warnings[0] and "corl-vl demo" in warnings[0]


def test_eval_of_a_tiny_model_gets_a_small_budget_and_says_so(tmp_path, fixtures_dir, capsys):
    """Random tiny models never stop: without --max-new-tokens their responses are capped at a few dozen
    tokens (not the benchmark's thousands), and one line says so and names the flag."""
    data = fixtures_dir / "eval" / "math500" / "test.json"
    out = tmp_path / "eval"
    argv = ["eval", "--model", "tiny-qwen2.5", "--benchmark", "math500", "--data", str(data), "--limit", "2"]
    assert main([*argv, "--output-dir", str(out)]) == 0
    err = capsys.readouterr().err
    assert "small model" in err and "at most 64 new tokens" in err and "--max-new-tokens" in err
    rows = [
        json.loads(line) for line in next(out.glob("generations/*/math500.jsonl")).read_text().splitlines()
    ]
    assert rows and all(len(r["responses"][0]) < 64 * 24 for r in rows)  # ≤ 64 tokens of at most a few chars
