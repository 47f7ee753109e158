"""``corl-vl eval`` end to end: scoring response files, ensembles, errors, and a tiny model generating."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from test_eval_scoring import MATHVISION_RESPONSES, MATHVISTA_RESPONSES

from corl_vl.cli import main


def _write_responses(
    path: Path, responses: dict[str, list[str]], extra: dict[str, str] | None = None
) -> Path:
    rows = [{"id": i, "response": r[0]} for i, r in responses.items()]
    rows += [{"id": i, "response": r} for i, r in (extra or {}).items()]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def test_score_responses_writes_all_outputs(fixtures_dir, tmp_path, capsys):
    responses = _write_responses(tmp_path / "model.jsonl", MATHVISTA_RESPONSES, extra={"9999": "\\boxed{1}"})
    out = tmp_path / "out"
    args = [
        "eval",
        "--benchmark",
        "mathvista",
        "--data",
        str(fixtures_dir / "eval" / "mathvista" / "testmini.json"),
    ]
    assert main([*args, "--responses", str(responses), "--output-dir", str(out)]) == 0
    results = json.loads((out / "results.json").read_text())
    assert results["benchmark"] == "mathvista" and results["overall"] == pytest.approx(7 / 11)
    assert results["missing_ids"] == ["11"]
    lines = [json.loads(line) for line in (out / "responses.jsonl").read_text().splitlines()]
    assert [line["id"] for line in lines][:3] == ["1", "2", "3"] and len(lines) == 11
    assert lines[0] == {
        "id": "1",
        "response": "so $d$ is \\boxed{1.20} m",
        "extracted": "1.20",
        "correct": True,
        "extracted_official": "1.20",
        "correct_official": True,
        "correct_verified": True,
        "missing": False,
    }
    assert lines[-1] == {
        "id": "11",
        "response": None,
        "extracted": None,
        "correct": False,
        "correct_official": False,
        "correct_verified": False,
        "missing": True,
    }
    report = (out / "report.md").read_text()
    assert "| model | 63.6 |" in report
    # official 7/11; verified 6/11 (4: "4.5" for 4 is truncated by the official integer rule); 1 disagreement
    assert "| model | mathvista | 63.6 | 54.5 | 1 |" in report
    assert (out / "report.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    err = capsys.readouterr().err
    assert "1 ids are not records of mathvista" in err


def test_ensemble_of_two_response_files(fixtures_dir, tmp_path):
    a = _write_responses(tmp_path / "a.jsonl", MATHVISION_RESPONSES)
    wrong = {i: ["\\boxed{0}"] for i in MATHVISION_RESPONSES}  # every answer wrong
    b = _write_responses(tmp_path / "b.jsonl", wrong)
    out = tmp_path / "out"
    argv = [
        "eval",
        "--benchmark",
        "mathvision",
        "--data",
        str(fixtures_dir / "eval" / "math-v"),
        "--responses",
        str(a),
        "--responses",
        str(b),
        "--ensemble",
        "1",
        "--scoring",
        "verified",
        "--output-dir",
        str(out),
    ]  # verified: 38 wrong, 91 right
    assert main(argv) == 0
    overall = {
        run: json.loads((out / run / "mathvision" / "results.json").read_text())["overall"]
        for run in ("a", "b", "ensemble")
    }
    # a alone: 9 / 14; b alone: 0; the 1 + 1 vote ties on every record a answered → a's answer (first seen)
    assert overall == {"a": pytest.approx(9 / 14), "b": 0.0, "ensemble": pytest.approx(9 / 14)}
    assert main([*argv[:-2], "--tie-policy", "none", "--output-dir", str(tmp_path / "none")]) == 0
    tied = json.loads((tmp_path / "none" / "ensemble" / "mathvision" / "results.json").read_text())
    assert tied["overall"] == 0.0  # every vote is a 1–1 tie → no label
    report = (out / "report.md").read_text()
    assert "| ensemble | 64.3 |" in report and "| b | 0.0 |" in report


def test_cli_errors_exit_2_with_one_line(fixtures_dir, tmp_path, capsys):
    data = str(fixtures_dir / "eval" / "mathvista")
    other = _write_responses(tmp_path / "other.jsonl", {"nope": ["\\boxed{1}"]})
    assert (
        main(
            [
                "eval",
                "--benchmark",
                "mathvista",
                "--data",
                data,
                "--responses",
                str(other),
                "--output-dir",
                str(tmp_path / "o"),
            ]
        )
        == 2
    )
    assert "none of its 1 ids is a record of this benchmark" in capsys.readouterr().err
    assert (
        main(["eval", "--benchmark", "mathvista", "--data", data, "--output-dir", str(tmp_path / "o")]) == 2
    )
    assert "give either --responses" in capsys.readouterr().err
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "1"}\n')
    assert (
        main(
            [
                "eval",
                "--benchmark",
                "mathvista",
                "--data",
                data,
                "--responses",
                str(bad),
                "--output-dir",
                str(tmp_path / "o"),
            ]
        )
        == 2
    )
    assert "bad.jsonl:1: missing field 'response'" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()  # nothing half-written


@pytest.mark.slow
def test_tiny_vlm_end_to_end_and_resume(fixtures_dir, tmp_path, tiny_checkpoint):
    """A tiny random Qwen2.5-VL answers three real MathVision records with images; a rerun reuses the cache."""
    tiny_checkpoint("tiny-qwen2.5-vl")
    src = fixtures_dir / "eval" / "math-v"
    data = tmp_path / "math-v"
    shutil.copytree(src / "images", data / "images")
    rows = [
        line
        for line in (src / "testmini.jsonl").read_text().splitlines()
        if json.loads(line)["id"] in {"16", "38", "64"}
    ]
    (data / "testmini.jsonl").write_text("\n".join(rows) + "\n")
    out = tmp_path / "out"
    argv = [
        "eval",
        "--model",
        "tiny-qwen2.5-vl",
        "--benchmark",
        "mathvision",
        "--data",
        str(data),
        "--max-new-tokens",
        "6",
        "--batch-size",
        "3",
        "--output-dir",
        str(out),
        "--no-progress",
    ]
    assert main(argv) == 0
    lines = [json.loads(line) for line in (out / "responses.jsonl").read_text().splitlines()]
    assert [line["id"] for line in lines] == ["16", "38", "64"]
    assert all(isinstance(line["response"], str) and line["response"] for line in lines)
    results = json.loads((out / "results.json").read_text())
    assert results["n_records"] == 3 and results["n_missing"] == 0
    cache = out / "generations" / "tiny-qwen2.5-vl" / "mathvision.jsonl"
    first = cache.read_text()
    assert len(first.splitlines()) == 3
    assert main(argv) == 0  # resumed: everything cached, nothing generated again
    assert cache.read_text() == first
    assert [json.loads(line)["response"] for line in (out / "responses.jsonl").read_text().splitlines()] == [
        line["response"] for line in lines
    ]
