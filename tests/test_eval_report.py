"""report.md: which number to quote, disagreements by category, and a run where every benchmark was skipped."""

from __future__ import annotations

import json
import shutil

import pytest

from corl_vl.cli import main
from corl_vl.data.problem import Problem
from corl_vl.errors import CorlError
from corl_vl.eval.report import render_markdown, write_outputs
from corl_vl.eval.scoring import score_responses
from corl_vl.eval.scoring.base import RecordScore, disagreement_category


def test_every_benchmark_skipped_is_one_line_and_writes_nothing(tmp_path):
    with pytest.raises(CorlError, match="nothing to report"):
        write_outputs(tmp_path, {})
    assert list(tmp_path.iterdir()) == []


def test_eval_of_a_text_model_on_a_vision_benchmark_exits_2(fixtures_dir, tmp_path, tiny_checkpoint, capsys):
    tiny_checkpoint("tiny-qwen2.5")
    src = fixtures_dir / "eval" / "math-v"
    data = tmp_path / "math-v"
    shutil.copytree(src / "images", data / "images")
    rows = [
        line for line in (src / "testmini.jsonl").read_text().splitlines() if json.loads(line)["id"] == "16"
    ]
    (data / "testmini.jsonl").write_text(rows[0] + "\n")
    out = tmp_path / "out"
    argv = [
        "eval",
        "--model",
        "tiny-qwen2.5",
        "--benchmark",
        "mathvision",
        "--data",
        str(data),
        "--output-dir",
        str(out),
        "--no-progress",
    ]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "skipping mathvision" in err and "nothing to report" in err and "Traceback" not in err
    assert not (out / "report.md").exists()


def _record(official: list[bool], verified: list[bool], ext_official, ext_verified) -> RecordScore:
    return RecordScore(
        "1",
        ["r"] * len(official),
        ext_verified,
        verified,
        extracted_official=ext_official,
        correct_official=official,
        correct_verified=verified,
    )


def test_disagreement_categories():
    assert disagreement_category(_record([False], [True], [None], ["5"])) == (
        "verified accepts: no official extraction"
    )
    assert disagreement_category(_record([False], [True], ["5 cm"], ["5"])) == (
        "verified accepts: different extraction"
    )
    assert disagreement_category(_record([True], [False], ["4.5"], ["4.5"])) == (
        "official accepts: same extraction, different comparison"
    )
    # the first response whose verdicts differ names the category
    record = _record([True, False], [True, True], ["1", "1.0"], ["1", "1.0"])
    assert disagreement_category(record) == "verified accepts: same extraction, different comparison"


def test_report_says_which_number_to_quote_and_counts_disagreements():
    # MathVerse's --quick_match is an exact string match: "0.5" for gold "\frac{1}{2}" is right only when verified
    problems = [Problem("1", "q", answer="\\frac{1}{2}"), Problem("2", "q", answer="3")]
    responses = {"1": ["The answer is 0.5."], "2": ["The answer is 3."]}
    results, _ = score_responses("mathverse", problems, responses, scoring="quick-match")
    assert results["overall"] == results["overall_official"] == 0.5 and results["overall_verified"] == 1.0
    assert results["disagree_categories"] == {"verified accepts: same extraction, different comparison": 1}
    report = render_markdown({"model": {"mathverse": results}})
    assert "**Which number to quote:** `overall`" in report and "`overall_verified`" in report
    assert "| model | mathverse | verified accepts: same extraction, different comparison | 1 |" in report


def test_a_lone_surrogate_is_written_as_a_replacement_character_and_counted(tmp_path):
    problems = [Problem("1", "q", answer="12"), Problem("2", "q", answer="3")]
    responses = {"1": ["\\boxed{1\u200b2} \ud800"], "2": ["The answer is 3. \udc00"]}
    results, records = score_responses("math500", problems, responses)
    assert results["overall"] == 1.0
    write_outputs(tmp_path, {"model": {"math500": (results, records)}})
    assert json.loads((tmp_path / "results.json").read_text(encoding="utf-8"))["n_replaced_characters"] == 2
    rows = [
        json.loads(line) for line in (tmp_path / "responses.jsonl").read_text(encoding="utf-8").splitlines()
    ]
    assert [r["response"] for r in rows] == ["\\boxed{1\u200b2} \ufffd", "The answer is 3. \ufffd"]
