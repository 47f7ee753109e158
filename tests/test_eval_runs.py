"""`corl-vl eval --model RUN_DIR`: every agent of a finished run, side by side with its base model; budgets."""

from __future__ import annotations

import json
import shutil

import pytest
from test_checkpoint import _builder, _config

from corl_vl.cli import main
from corl_vl.errors import CorlError
from corl_vl.eval.runs import expand_models
from corl_vl.recipe import train


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """A two-agent tiny run with checkpoints at steps 1 and 2."""
    run = tmp_path_factory.mktemp("runs") / "demo"
    cfg = _config(run)
    cfg.train.max_steps, cfg.train.save_every = 2, 1
    train(cfg, progress=False, prepare=_builder())
    return run


def _wemath_group(fixtures_dir, tmp_path):
    """The fixture's one We-Math group with images (3steps_1: three steps and the composite question)."""
    src = fixtures_dir / "eval" / "we-math"
    data = tmp_path / "we-math"
    shutil.copytree(src / "3steps", data / "3steps")
    rows = [r for r in json.loads((src / "testmini.json").read_text()) if r["ID"] == "3steps_1"]
    (data / "testmini.json").write_text(json.dumps(rows))
    return data


def test_run_folder_expands_to_its_agents(tiny_run):
    latest = expand_models([str(tiny_run)])
    assert latest.labels == ["qwen-step2", "internvl-step2"]
    assert latest.models == [str(tiny_run / "checkpoints" / "step-000002" / a) for a in ("qwen", "internvl")]
    assert latest.default_output_dir == tiny_run / "eval" / "step-000002"
    earlier = expand_models([str(tiny_run), "tiny-qwen2.5-vl"], step=1, baselines=True)
    assert earlier.labels == ["qwen-base", "qwen-step1", "internvl-base", "internvl-step1", "tiny-qwen2.5-vl"]
    assert earlier.models[0] == "tiny-qwen2.5-vl" and earlier.models[2] == "tiny-internvl3.5"  # config.yaml
    with pytest.raises(CorlError, match=r"no complete checkpoint at --step 7 \(saved steps: 1, 2\)"):
        expand_models([str(tiny_run)], step=7)
    with pytest.raises(CorlError, match="give --model RUN_DIR"):
        expand_models(["tiny-qwen2.5-vl"], baselines=True)


@pytest.mark.slow
def test_eval_run_reports_every_agent_beside_its_base(tiny_run, fixtures_dir, tmp_path, capsys):
    data = _wemath_group(fixtures_dir, tmp_path)
    argv = [
        "eval",
        "--model",
        str(tiny_run),
        "--benchmark",
        "wemath",
        "--data",
        str(data),
        "--limit",
        "4",
        "--baseline-models",
        "--max-new-tokens",
        "4",
        "--no-progress",
    ]
    assert main(argv) == 0
    out = capsys.readouterr().out
    for label in ("qwen-step2", "qwen-base", "internvl-step2", "internvl-base"):
        assert f"{label}/wemath: overall" in out
    report = (tiny_run / "eval" / "step-000002" / "report.md").read_text()
    rows = dict.fromkeys(line.split("|")[1].strip() for line in report.splitlines() if line.startswith("| "))
    assert [r for r in rows if r.endswith(("-base", "-step2"))] == [
        "qwen-base",
        "qwen-step2",
        "internvl-base",
        "internvl-step2",
    ]


@pytest.mark.slow
def test_new_tokens_are_capped_by_the_context(tiny_checkpoint, fixtures_dir, tmp_path, capsys):
    from corl_vl.eval.generate import Decoding, Generator, context_length
    from corl_vl.eval.loaders import load_benchmark

    path = tiny_checkpoint("tiny-qwen2.5-vl")
    assert context_length(str(path)) == 4096  # max_position_embeddings of the tiny config
    problems = load_benchmark("wemath", _wemath_group(fixtures_dir, tmp_path))[
        :2
    ]  # --limit takes whole groups
    generator = Generator("tiny-qwen2.5-vl", batch_size=2)
    longest = max(len(generator.adapter.encode_prompt(p)) for p in problems)
    generator.context_length = longest + 3  # a model whose context leaves room for 3 new tokens
    responses = generator.generate(
        problems,
        Decoding(0.0, 1.0, 500, 1),
        tmp_path / "cache.jsonl",
        progress=False,
        description="tiny · wemath",
    )
    assert set(responses) == {p.id for p in problems}
    err = capsys.readouterr().err
    assert f"tiny · wemath: max_new_tokens 500 does not fit the context length {longest + 3}" in err
    assert f"({longest} tokens); capped at 3 " in err
