"""`corl-vl grade`: fields kept, extracted/correct added, accuracy printed, bad lines named, atomic output."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from corl_vl.cli import main

RECORDS = [
    {"id": "a", "response": "so \\boxed{\\frac{1}{2}}", "answer": "0.5", "extra": [1, 2]},
    {"id": "b", "response": "The answer is 7.", "answer": 8},
    {
        "id": "c",
        "response": "I pick (C).",
        "answer": "145°",
        "choices": ["135°", "140°", "145°", "150°"],
        "question_type": "multi_choice",
        "answer_type": "text",
        "precision": None,
    },
    {
        "id": "d",
        "response": "\\boxed{1.23}",
        "answer": "1.2",
        "question_type": "free_form",
        "answer_type": "float",
        "precision": 1,
        "choices": None,
    },
    {"id": "e", "response": "\\boxed{red}", "answer": "A", "options": ["red", "blue"]},
    {"id": "f", "response": "no idea", "answer": "3"},
]


def write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_grade_jsonl(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = write(tmp_path / "responses.jsonl", [json.dumps(r, ensure_ascii=False) for r in RECORDS])
    out = tmp_path / "sub" / "graded.jsonl"
    assert (
        main(["grade", "--input", str(src), "--output", str(out), "--workers", "2", "--timeout", "10"]) == 0
    )
    graded = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [g["id"] for g in graded] == ["a", "b", "c", "d", "e", "f"]
    assert [g["correct"] for g in graded] == [True, False, True, True, True, False]
    assert [g["extracted"] for g in graded] == ["\\frac{1}{2}", "7", "C", "1.23", "red", None]
    for original, result in zip(RECORDS, graded):
        assert {k: result[k] for k in original} == original  # every input field kept unchanged
    assert "accuracy: 0.6667 (4/6)" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ("{not json", "responses.jsonl:2: invalid JSON"),
        ('{"answer": "1"}', "responses.jsonl:2: missing field 'response'"),
        ('["response", "answer"]', "responses.jsonl:2: expected a JSON object"),
        (
            '{"response": "x", "answer": "1", "choices": "AB"}',
            "responses.jsonl:2: field 'choices' must be a list",
        ),
        ('{"response": "x", "answer": "1", "precision": 1.5}', "responses.jsonl:2: field 'precision'"),
    ],
)
def test_malformed_line_names_its_number(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], bad: str, message: str
) -> None:
    src = write(tmp_path / "responses.jsonl", [json.dumps(RECORDS[0]), bad])
    out = tmp_path / "graded.jsonl"
    assert main(["grade", "--input", str(src), "--output", str(out)]) == 2
    assert message in capsys.readouterr().err
    assert not out.exists() and list(tmp_path.iterdir()) == [src]  # nothing half-written


def test_missing_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(["grade", "--input", str(tmp_path / "nope.jsonl"), "--output", str(tmp_path / "o.jsonl")]) == 2
    )
    assert "nope.jsonl: no such file" in capsys.readouterr().err


def test_extraction_and_scoring_flags(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = [
        {"id": "1", "response": "-5", "answer": "-5"},  # a bare answer: both modes
        {"id": "2", "response": "Therefore, the year it peaked is 2019.", "answer": "2019"},  # lenient only
        # MathVista's official integer rule truncates 4.5 to 4; math equivalence does not
        {
            "id": "3",
            "response": "The answer is 4.5",
            "answer": "4",
            "question_type": "free_form",
            "answer_type": "integer",
        },
    ]
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))

    def graded(*flags: str) -> list[bool]:
        out = tmp_path / "out.jsonl"
        assert main(["grade", "--input", str(src), "--output", str(out), "--no-progress", *flags]) == 0
        return [json.loads(line)["correct"] for line in out.read_text().splitlines()]

    assert graded() == [True, True, False]  # lenient, verified: the defaults
    assert graded("--extraction", "strict") == [True, False, False]
    assert graded("--scoring", "official", "--benchmark", "mathvista") == [True, True, True]
    assert (
        main(["grade", "--input", str(src), "--output", str(tmp_path / "o.jsonl"), "--scoring", "official"])
        == 2
    )
    assert "--benchmark" in capsys.readouterr().err
