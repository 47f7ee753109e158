"""``corl-vl eval --extractor model:…``: the official extraction prompt runs through our own engine with a local
model (a tiny random one here, so this checks the plumbing, not the extractions), cached per record."""

from __future__ import annotations

import json

import pytest
from test_eval_scoring import MATHVISTA_RESPONSES

from corl_vl.cli import main
from corl_vl.data.problem import Problem
from corl_vl.errors import CorlError
from corl_vl.eval.scoring.model_extractor import clean_extraction, extraction_prompt, parse_extractor


def test_extractor_spec_and_prompts() -> None:
    assert parse_extractor("rules") is None and parse_extractor("model:tiny-qwen2.5") == "tiny-qwen2.5"
    with pytest.raises(CorlError, match="--extractor"):
        parse_extractor("gpt4")
    problem = Problem("3", "Find the angle.", choices=["135°", "140°"])
    prompt = extraction_prompt("mathvista", problem, "It is (B).")
    assert prompt.endswith(
        "Find the angle.\nChoices:\n(A) 135°\n(B) 140°\n\nIt is (B).\n\nExtracted answer: "
    )
    assert "Model response: 'It is (B).'" in extraction_prompt("mathverse", problem, "It is (B).")
    with pytest.raises(CorlError, match="official rules"):
        extraction_prompt("mathvision", problem, "x")
    assert clean_extraction(" Extracted answer: 14\nmore") == "14" and clean_extraction("null") is None


def test_model_extractor_is_refused_for_rule_based_benchmarks(tmp_path, capsys) -> None:
    responses = tmp_path / "r.jsonl"
    responses.write_text('{"id": "1", "response": "5"}\n')
    argv = [
        "eval",
        "--benchmark",
        "mathvision",
        "--responses",
        str(responses),
        "--output-dir",
        str(tmp_path / "o"),
        "--extractor",
        "model:tiny-qwen2.5",
    ]
    assert main(argv) == 2  # before any model or data is loaded
    assert "scored by its official rules" in capsys.readouterr().err
    assert main([*argv[:-1], "gpt4"]) == 2


@pytest.mark.slow
def test_model_extractor_end_to_end(fixtures_dir, tmp_path, tiny_checkpoint) -> None:
    tiny_checkpoint("tiny-qwen2.5")
    responses = tmp_path / "model.jsonl"
    ids = ["1", "3", "8"]
    rows_in = [{"id": i, "response": MATHVISTA_RESPONSES[i][0]} for i in ids]
    rows_in.append({"id": "2", "response": "1000"})  # an integer answer: the official shortcut, no model call
    responses.write_text("".join(json.dumps(row) + "\n" for row in rows_in))
    out = tmp_path / "out"
    argv = [
        "eval",
        "--benchmark",
        "mathvista",
        "--data",
        str(fixtures_dir / "eval" / "mathvista" / "testmini.json"),
        "--responses",
        str(responses),
        "--extractor",
        "model:tiny-qwen2.5",
        "--batch-size",
        "3",
        "--output-dir",
        str(out),
        "--no-progress",
    ]
    assert main(argv) == 0
    cache = out / "extractions" / "model" / "mathvista.jsonl"
    rows = [json.loads(line) for line in cache.read_text().splitlines()]
    assert sorted(r["id"].split("#")[0] for r in rows) == ids  # one extraction per response, keyed by record
    lines = {
        json.loads(line)["id"]: json.loads(line)
        for line in (out / "responses.jsonl").read_text().splitlines()
    }
    assert lines["2"]["extracted_official"] == "1000" and lines["2"]["correct_official"] is True
    for i in ids:  # the model's (cleaned) output is what official scoring judged
        raw = next(r["responses"][0] for r in rows if r["id"].startswith(f"{i}#"))
        assert lines[i]["extracted_official"] == clean_extraction(raw)
    first = cache.read_text()
    assert main(argv) == 0  # a rerun extracts nothing again
    assert cache.read_text() == first
