"""``corl-vl diagnose --model A --model B --data D``: answers generated, written, graded, then diagnosed."""

from __future__ import annotations

import json
from pathlib import Path

from corl_vl.answers import grade
from corl_vl.cli import main
from corl_vl.data import generate_problems, to_text_problem
from corl_vl.science.diagnostics import answers_file_names, cohen_kappa, diagnose


def _problems_file(path: Path, n: int) -> list[dict]:
    rows = []
    for p in (to_text_problem(q) for q in generate_problems(n, seed=1)):
        rows.append({"id": p.id, "question": p.question, "answer": p.answer, "choices": p.choices})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return rows


def test_generate_then_diagnose_two_tiny_models(tmp_path: Path, capsys) -> None:
    data = tmp_path / "problems.jsonl"
    problems = _problems_file(data, 4)
    out = tmp_path / "diag"
    argv = [
        "diagnose",
        "--model",
        "tiny-qwen2.5",
        "--model",
        "tiny-llama3",
        "--data",
        str(data),
        "--output-dir",
        str(out),
        "--max-new-tokens",
        "12",
        "--json",
    ]
    assert main(argv) == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])

    gold = {r["id"]: r for r in problems}
    correctness = []
    for name in ("tiny-qwen2.5", "tiny-llama3"):
        rows = [json.loads(line) for line in (out / f"{name}.jsonl").read_text().splitlines()]
        assert [r["id"] for r in rows] == [r["id"] for r in problems]
        for row in rows:
            assert set(row) >= {"id", "response", "extracted", "correct"}
            graded = grade(row["response"], gold[row["id"]]["answer"], choices=gold[row["id"]]["choices"])
            assert (row["extracted"], row["correct"]) == (graded.extracted, graded.correct)
        correctness.append([r["correct"] for r in sorted(rows, key=lambda r: r["id"])])

    assert report["models"] == ["tiny-qwen2.5", "tiny-llama3"] and report["n"] == 4
    assert report["accuracies"]["tiny-qwen2.5"] == sum(correctness[0]) / 4
    assert report["accuracies"]["tiny-llama3"] == sum(correctness[1]) / 4
    assert report["kappa"] == cohen_kappa(*correctness)
    n_exactly_one = sum(a != b for a, b in zip(*correctness))
    assert report["complementarity"] == 100.0 * n_exactly_one / 4
    # the written files are ordinary answers files: reading them back gives the same report
    assert diagnose([out / "tiny-qwen2.5.jsonl", out / "tiny-llama3.jsonl"]) == report


def test_generate_mode_bad_arguments(tmp_path: Path, capsys) -> None:
    data = tmp_path / "problems.jsonl"
    _problems_file(data, 2)
    assert main(["diagnose", "--model", "tiny-qwen2.5", "--data", str(data)]) == 2
    assert "at least two --model" in capsys.readouterr().err
    argv = ["diagnose", "--model", "a", "--model", "b", "--data", str(data), "--answers", str(data)]
    assert main(argv) == 2
    assert "not both" in capsys.readouterr().err
    no_answer = tmp_path / "no_answer.jsonl"
    no_answer.write_text(
        '{"id": "x", "question": "1+1?", "answer": "2"}\n{"id": "y", "question": "2+2?", "answer": ""}\n'
    )
    assert (
        main(["diagnose", "--model", "tiny-qwen2.5", "--model", "tiny-llama3", "--data", str(no_answer)]) == 2
    )
    err = capsys.readouterr().err
    assert str(no_answer) in err and "row 1" in err and "'answer'" in err


def test_answers_file_names_unique_and_safe() -> None:
    assert answers_file_names(["tiny-qwen2.5", "/ckpt/run 1/", "tiny-qwen2.5"]) == [
        "tiny-qwen2.5",
        "run_1",
        "tiny-qwen2.5-2",
    ]
