"""`corl-vl eval --protocol co-rl` (issue #42): the paper's settings in one flag, run offline on the shipped
benchmark samples against a tiny trained run, recorded in report.md and results.json; flags that would change
a fixed setting are refused."""

from __future__ import annotations

import json
import shutil

import pytest
from test_checkpoint import _builder, _config

from corl_vl import evaluate_protocol
from corl_vl.cli import main
from corl_vl.errors import CorlError
from corl_vl.eval.protocol import CO_RL, get_protocol
from corl_vl.recipe import train


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """A two-agent tiny run (the demo's tiny Qwen2.5-VL and InternVL3.5) with one checkpoint."""
    run = tmp_path_factory.mktemp("runs") / "demo"
    cfg = _config(run)
    cfg.train.max_steps, cfg.train.save_every = 1, 1
    train(cfg, progress=False, prepare=_builder())
    return run


@pytest.fixture(scope="module")
def samples(tmp_path_factory):
    """The shipped samples that generation can read offline: MathVerse text-only records, the We-Math group
    with images (3steps_1) and the MathVision records with images (16, 38, 64)."""
    from conftest import FIXTURES

    src, data = FIXTURES / "eval", tmp_path_factory.mktemp("bench")
    shutil.copytree(src / "mathverse", data / "mathverse")
    shutil.copytree(src / "we-math" / "3steps", data / "we-math" / "3steps")
    rows = [r for r in json.loads((src / "we-math" / "testmini.json").read_text()) if r["ID"] == "3steps_1"]
    (data / "we-math" / "testmini.json").write_text(json.dumps(rows))
    shutil.copytree(src / "math-v" / "images", data / "math-v" / "images")
    lines = (src / "math-v" / "testmini.jsonl").read_text().splitlines()
    keep = [line for line in lines if json.loads(line)["id"] in ("16", "38", "64")]
    (data / "math-v" / "testmini.jsonl").write_text("\n".join(keep) + "\n")
    return data


def test_the_protocol_runs_a_trained_run_offline_and_records_every_setting(tiny_run, samples, capsys):
    argv = ["eval", "--protocol", "co-rl", "--model", str(tiny_run), "--data", str(samples)]
    argv += ["--benchmark", "mathverse,wemath,mathvision", "--limit", "2", "--no-progress"]
    assert main(argv) == 0
    out_dir = tiny_run / "eval" / "step-000001"
    report = (out_dir / "report.md").read_text()
    assert "## Protocol: co-rl" in report and "Co-RL paper, App. D.5" in report
    for key in CO_RL.settings:
        assert f"| {key} |" in report
    assert "| mathverse | (the local file) |" in report and "verified scoring" in report
    result = json.loads((out_dir / "qwen-step1" / "wemath" / "results.json").read_text())
    assert result["protocol"]["name"] == "co-rl"
    assert result["protocol"]["settings"]["vision max_new_tokens"]["value"] == 16384
    assert result["split"] == {"name": "(the local file)", "source": str(samples / "we-math"), "records": 4}
    assert result["scoring"] == "verified" and result["extraction"] == "lenient"
    decoding = result["decoding"]
    assert (decoding["temperature"], decoding["samples"], decoding["max_long_side"]) == (0.0, 1, 1024)
    assert decoding["max_new_tokens"] == 64  # a tiny model: the small-model budget, said in the protocol
    assert decoding["answer_format"] == "boxed"  # the checkpoint's training format
    mathverse = json.loads((out_dir / "internvl-step1" / "mathverse" / "results.json").read_text())
    assert mathverse["split"]["records"] == 2 and "overall_official" in mathverse


def test_the_python_equivalent_gives_the_same_record(tiny_run, samples, tmp_path):
    by_run = evaluate_protocol(
        [str(tiny_run)],
        benchmarks=["mathverse"],
        data=str(samples),
        output_dir=str(tmp_path / "out"),
        limit=1,
    )
    assert set(by_run) == {"qwen-step1", "internvl-step1"}
    result = by_run["qwen-step1"]["mathverse"]
    assert result["protocol"] == CO_RL.record() and result["split"]["records"] == 1
    assert (tmp_path / "out" / "report.md").is_file()


@pytest.mark.parametrize(
    ("extra", "match"),
    [
        (["--temperature", "0.5"], "--protocol co-rl fixes --temperature"),
        (["--max-new-tokens", "8"], "--protocol co-rl fixes --max-new-tokens"),
        (["--scoring", "official"], "--protocol co-rl fixes --scoring"),
        (["--split", "test"], "--protocol co-rl fixes --split"),
    ],
)
def test_a_flag_that_would_change_a_fixed_setting_is_refused(tmp_path, capsys, extra, match):
    argv = [
        "eval",
        "--protocol",
        "co-rl",
        "--model",
        "tiny-qwen2.5-vl",
        "--output-dir",
        str(tmp_path),
        *extra,
    ]
    assert main(argv) == 2  # refused before any model loads
    assert match in capsys.readouterr().err


def test_protocol_needs_a_model_and_benchmark_is_otherwise_required(tmp_path, capsys):
    responses = tmp_path / "r.jsonl"
    responses.write_text('{"id": "1", "response": "1"}\n')
    assert (
        main(["eval", "--protocol", "co-rl", "--responses", str(responses), "--output-dir", str(tmp_path)])
        == 2
    )
    assert "--protocol co-rl generates responses" in capsys.readouterr().err
    assert main(["eval", "--responses", str(responses), "--output-dir", str(tmp_path)]) == 2
    assert "--benchmark is required" in capsys.readouterr().err
    with pytest.raises(CorlError, match="unknown --protocol"):
        get_protocol("mm-upt")
