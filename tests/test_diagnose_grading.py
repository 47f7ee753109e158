"""``diagnose`` grades a row exactly as ``corl-vl grade`` grades the same record: options (MathVision),
precision (MathVista floats) and question_type (a free-form question ignores its choices)."""

from __future__ import annotations

import json

import pytest

from corl_vl.answers import grade_record
from corl_vl.science.diagnostics import load_correctness

# Hand-made records; the verdicts follow from the grading rules (docs/grading.md).
RECORDS = [
    # option letter B of ["3", "5"] is the gold 5
    {"id": "opt", "answer": "5", "options": ["3", "5"], "response": "So the answer is \\boxed{B}."},
    # 1.54 rounded to the record's one decimal is the gold 1.5
    {"id": "prec", "answer": "1.5", "precision": 1, "answer_type": "float", "response": "\\boxed{1.54}"},
    # a free-form question: "A" is not the option text "2", its choices do not apply
    {
        "id": "free",
        "answer": "2",
        "choices": ["2", "3"],
        "question_type": "free_form",
        "response": "\\boxed{A}",
    },
]
EXPECTED = {"opt": True, "prec": True, "free": False}


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_rows_grade_like_grade(tmp_path):
    assert {r["id"]: grade_record(r).correct for r in RECORDS} == EXPECTED
    assert load_correctness(_write(tmp_path / "a.jsonl", RECORDS)) == EXPECTED


def test_gold_file_fields_are_used(tmp_path):
    gold = {r["id"]: {k: v for k, v in r.items() if k != "response"} for r in RECORDS}
    answers = _write(tmp_path / "a.jsonl", [{"id": r["id"], "response": r["response"]} for r in RECORDS])
    assert load_correctness(answers, gold) == EXPECTED


@pytest.mark.parametrize(("extracted", "expected"), [("B", True), ("A", False), (None, False)])
def test_extracted_answers_use_the_options(tmp_path, extracted, expected):
    row = {"id": "opt", "answer": "5", "options": ["3", "5"], "extracted": extracted}
    assert load_correctness(_write(tmp_path / "a.jsonl", [row])) == {"opt": expected}
