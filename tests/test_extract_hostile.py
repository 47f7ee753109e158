"""Hostile model text: 1 MB responses of every pattern the extractors know grade in at most a second; invisible
format characters and lone surrogates; a long number is never cut into another number."""

from __future__ import annotations

import json
import time

import pytest

from corl_vl.answers import extract_answer, grade
from corl_vl.answers.clean import encodable, for_reading
from corl_vl.data.problem import Problem
from corl_vl.eval.scoring import get_scorer

MB = 1_000_000


def _repeat(unit: str) -> str:
    return unit * (MB // len(unit))


HOSTILE = {
    "open answer tags": _repeat("<answer>"),
    "open then text": "<answer>" + _repeat("x "),
    "closed answer tags": _repeat("<answer>1</answer>"),
    "unclosed boxes": _repeat("\\boxed{"),
    "one unclosed box": "\\boxed{" + "1" * MB,
    "closed boxes": _repeat("\\boxed{1}"),
    "fbox": _repeat("\\fbox{"),
    "digit run": "1" * MB,
    "digit run with commas": _repeat("1,"),
    "decimals": _repeat("1."),
    "numbers": _repeat("12 "),
    "answer phrases": _repeat("the answer is "),
    "answer markers": _repeat("Answer:"),
    "answer word": _repeat("Answer"),
    "quoted answer": _repeat('The answer is "'),
    "chinese markers": _repeat("答案是"),
    "letters in brackets": _repeat("(A)"),
    "option phrases": _repeat("option "),
    "letter lines": _repeat("A. "),
    "dollars": "$" * MB,
    "dollar numbers": _repeat("$1"),
    "inline math": _repeat("\\("),
    "braces": "{" * MB,
    "closing braces": "}" * MB,
    "emphasis": "*" * MB,
    "spaces": " " * MB,
    "newlines": "\n" * MB,
    "equals": _repeat("x="),
    "fractions": _repeat("\\frac{1}{2}"),
    "text commands": _repeat("\\text{"),
    "declines": _repeat("cannot "),
    "zero-width": _repeat("\u200b1"),
}

PROBLEMS = {
    "mathvista": Problem(
        "1",
        "q",
        choices=["1", "2", "3"],
        answer="1",
        meta={"question_type": "multi_choice", "answer_type": "text"},
    ),
    "mathverse": Problem("1", "q", answer="1", meta={}),
    "wemath": Problem("1", "q", choices=["1", "2", "3"], answer="A", meta={}),
    "mathvision": Problem("1", "q", choices=["1", "2", "3"], answer="A", meta={}),
    "math500": Problem("1", "q", answer="1", meta={}),
}
# CPU seconds of this process: a loaded machine stretches wall time, not the work done. The wall-clock cap
# only catches a hang (the math-verify worker's time is not this process's CPU time).
LIMIT_S = 1.0
WALL_CAP_S = 30.0


@pytest.fixture(scope="module", autouse=True)
def _warm():
    grade("The answer is \u200b$\\frac{1}{2}$.", "0.5")  # tables built once
    grade("no marker at all here", "1")  # the math-verify worker started (lenient extraction's last step)
    for name, problem in PROBLEMS.items():
        get_scorer(name).score_record(problem, ["(A) 1"])


def _timed(fn) -> float:
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    assert time.perf_counter() - wall <= WALL_CAP_S
    return time.process_time() - cpu


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_a_megabyte_of_hostile_text_grades_within_a_second(name):
    text = HOSTILE[name]
    assert _timed(lambda: grade(text, "1")) <= LIMIT_S
    assert _timed(lambda: grade(text, "B", choices=["1", "2", "3"])) <= LIMIT_S
    for bench, problem in PROBLEMS.items():
        scorer = get_scorer(bench)
        assert _timed(lambda s=scorer, p=problem: s.score_record(p, [text])) <= LIMIT_S, bench


def test_the_answer_tag_is_the_last_closed_one():
    assert extract_answer("<answer>1</answer> then <answer>2</answer> and <answer>3") == "2"
    assert extract_answer("<ANSWER>x <answer>\\boxed{7}</answer>") == "7"


def test_format_characters_are_invisible_to_extraction():
    assert grade("\\boxed{1\u200b2}", "12").correct
    assert grade("The answer is \ufeff1\u200d2\u2060.", "12").correct
    assert grade("\u202e(B)\u202c", "B", choices=["3", "4"]).correct
    assert for_reading("plain ascii") == "plain ascii"


def test_lone_surrogates_are_replaced_and_counted():
    assert grade("\\boxed{12}\ud800", "12").correct
    assert extract_answer("\udfff The answer is 7.", mode="lenient") == "7"
    value, n = encodable({"response": "a\ud800b", "responses": ["\udc00", "ok"], "correct": True})
    assert n == 2 and value == {"response": "a\ufffdb", "responses": ["\ufffd", "ok"], "correct": True}
    assert value["response"].encode("utf-8")  # writable


def test_a_long_number_is_never_cut_into_another_number():
    big = "1" + "0" * 9999
    for response in (big, f"The answer is {big}.", f"so {big}", f"\\boxed{{{big}}}"):
        graded = grade(response, "0")
        assert not graded.correct
        assert graded.extracted in (None, big)


def test_grade_writes_a_lone_surrogate_as_a_replacement_character_and_counts_it(tmp_path, capsys):
    from corl_vl.cli import main

    rows = tmp_path / "responses.jsonl"
    rows.write_text('{"id": "1", "response": "so \\\\boxed{12} \\ud800", "answer": "12"}\n')
    out = tmp_path / "graded.jsonl"
    assert main(["grade", "--input", str(rows), "--output", str(out), "--no-progress"]) == 0
    assert "1 unencodable character(s) written as U+FFFD" in capsys.readouterr().err
    (row,) = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert row["correct"] is True and "\ufffd" in row["response"]
