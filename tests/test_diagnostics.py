"""Error-decoupling diagnostics: κ, overlap, complementarity on hand-computed 2×2 tables, files, CLI."""

from __future__ import annotations

import json

import pytest

from corl_vl.cli import main
from corl_vl.errors import CorlError
from corl_vl.science import diagnostics as dg


def _vectors(n11: int, n10: int, n01: int, n00: int) -> tuple[list[bool], list[bool]]:
    a = [True] * n11 + [True] * n10 + [False] * n01 + [False] * n00
    b = [True] * n11 + [False] * n10 + [True] * n01 + [False] * n00
    return a, b


def test_kappa_and_friends_on_a_hand_table() -> None:
    # n11=20, n10=5, n01=10, n00=15: p_o = 35/50 = 0.7; acc 0.5 and 0.6 → p_e = 0.3 + 0.2 = 0.5; κ = 0.2/0.5 = 0.4.
    stats = dg.pair_stats(*_vectors(20, 5, 10, 15))
    assert stats.kappa == pytest.approx(0.4)
    assert (stats.accuracy_a, stats.accuracy_b, stats.n) == (0.5, 0.6, 50)
    assert stats.error_overlap == pytest.approx(15 / 30)  # both wrong / either wrong
    assert stats.p_b_wrong_given_a_wrong == pytest.approx(15 / 25)
    assert stats.p_a_wrong_given_b_wrong == pytest.approx(15 / 20)
    assert stats.complementarity == pytest.approx(30.0)  # 15 of 50 problems have exactly one model right
    # Cohen's SE: sqrt(0.7·0.3/50) / (1 − 0.5) = 0.0648074 / 0.5 = 0.1296148…
    assert stats.kappa_se == pytest.approx(0.1296148, abs=1e-6)
    assert stats.recommendation.startswith("good partner")


@pytest.mark.parametrize(
    ("cells", "kappa", "verdict"),
    [
        ((45, 5, 5, 45), 0.8, "correlated errors"),  # p_o 0.9, p_e 0.5
        ((73, 27, 27, 73), 0.46, "borderline"),  # p_o 0.73, p_e 0.5
        ((71, 29, 29, 71), 0.42, "good partner"),  # p_o 0.71: exactly the paper's different-family bound
        ((151, 49, 49, 151), 0.51, "correlated errors"),  # p_o 0.755: exactly the same-family bound
        ((0, 2, 2, 0), -1.0, "good partner"),  # always disagree
    ],
)
def test_kappa_on_more_hand_tables(cells: tuple[int, int, int, int], kappa: float, verdict: str) -> None:
    stats = dg.pair_stats(*_vectors(*cells))
    assert stats.kappa == pytest.approx(kappa)
    assert stats.recommendation.startswith(verdict)


@pytest.mark.parametrize(
    ("a", "b", "said"),
    [
        ([True] * 4, [False] * 4, "model A is always right and model B is always wrong"),  # κ would read 0
        ([True] * 4, [True, False, True, False], "model A is always right"),  # p_o = p_e = 0.5
        ([True, False, True, True], [False] * 4, "model B is always wrong"),
        ([False] * 4, [False] * 4, "model A is always wrong and model B is always wrong"),
    ],
)
def test_kappa_undefined_when_a_model_never_errs_or_never_succeeds(a: list, b: list, said: str) -> None:
    """Issue 45: an always-right and an always-wrong model are no "good partners": κ is undefined, and says why."""
    stats = dg.pair_stats(a, b)
    assert stats.kappa is None and stats.kappa_se is None
    assert stats.recommendation.startswith("undefined") and said in stats.recommendation
    assert dg.cohen_kappa(a, b) is None


def test_kappa_undefined_when_both_models_are_always_right() -> None:
    stats = dg.pair_stats([True] * 4, [True] * 4)
    assert stats.kappa is None and stats.kappa_se is None and stats.error_overlap is None
    assert stats.recommendation.startswith("undefined")


def test_thresholds_are_the_papers_numbers() -> None:
    assert dg.recommend(0.42).startswith("good partner")
    assert dg.recommend(0.51).startswith("correlated errors")
    assert dg.recommend(0.4201).startswith("borderline")


def test_diagnose_two_files_matches_rows_by_id(fixtures_dir) -> None:
    d = fixtures_dir / "diagnostics"
    report = dg.diagnose([d / "a.jsonl", d / "b.jsonl"])  # b.jsonl is shuffled
    # n11=4, n10=1, n01=2, n00=3: the first hand table divided by 5.
    assert report["n"] == 10
    assert report["accuracies"] == {"a": 0.5, "b": 0.6}
    assert report["kappa"] == pytest.approx(0.4)
    assert report["error_overlap"] == pytest.approx(0.5)
    assert report["complementarity"] == pytest.approx(30.0)
    assert report["recommendation"].startswith("good partner")


def test_diagnose_three_files_gives_every_pair(fixtures_dir) -> None:
    d = fixtures_dir / "diagnostics"
    report = dg.diagnose([d / "a.jsonl", d / "b.jsonl", d / "c.jsonl"])
    pairs = {(p["a"], p["b"]): p for p in report["pairs"]}
    assert set(pairs) == {("a", "b"), ("a", "c"), ("b", "c")}
    # a vs c: n11=3, n10=2, n01=2, n00=3 → p_o 0.6, p_e 0.5, κ 0.2.
    assert pairs["a", "c"]["kappa"] == pytest.approx(0.2)


@pytest.mark.parametrize(
    ("files", "message"),
    [
        (["a.jsonl", "b_missing.jsonl"], r"b_missing\.jsonl: id 'p9' \(from .*a\.jsonl\) is missing"),
        (["a.jsonl", "bad_correct.jsonl"], r"bad_correct\.jsonl:3: field 'correct' must be true/false"),
        (["a.jsonl", "duplicate.jsonl"], r"duplicate\.jsonl:2: duplicate id 'p0'"),
        (["a.jsonl", "bad_json.jsonl"], r"bad_json\.jsonl:2: invalid JSON"),
        (
            ["a.jsonl", "ungradable.jsonl"],
            r"ungradable\.jsonl:1: cannot grade: no 'answer' field and no --gold",
        ),
        (["a.jsonl"], "at least two"),
    ],
)
def test_bad_files_are_one_line_errors(fixtures_dir, files: list[str], message: str) -> None:
    with pytest.raises(CorlError, match=message):
        dg.diagnose([fixtures_dir / "diagnostics" / f for f in files])


def test_cli_json_and_table(fixtures_dir, capsys: pytest.CaptureFixture[str]) -> None:
    d = fixtures_dir / "diagnostics"
    args = ["diagnose", "--answers", str(d / "a.jsonl"), "--answers", str(d / "b.jsonl")]
    assert main([*args, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    for key in ("kappa", "error_overlap", "complementarity", "accuracies", "n", "recommendation"):
        assert key in out
    assert out["kappa"] == pytest.approx(0.4)
    assert main(args) == 0
    table = capsys.readouterr().out
    assert "0.400" in table and "30.0" in table
    assert main(["diagnose", "--answers", str(d / "a.jsonl"), "--answers", str(d / "b_missing.jsonl")]) == 2


def test_extraction_mode_decides_how_responses_are_graded(tmp_path, capsys) -> None:
    """A final sentence stating the number counts under lenient extraction (grade/eval's default), not under
    strict (the markers peer votes read); rows already carrying 'correct' are unaffected."""
    rows_a = [
        {"id": "p0", "answer": "7", "response": "\\boxed{7}"},
        {"id": "p1", "answer": "5", "response": "Counting them, there are 5 apples in total."},
        {"id": "p2", "answer": "4", "response": "\\boxed{3}"},
        {"id": "p3", "answer": "2", "correct": True},
    ]
    rows_b = [{"id": f"p{i}", "correct": ok} for i, ok in enumerate([False, True, True, False])]
    files = []
    for name, rows in (("a", rows_a), ("b", rows_b)):
        path = tmp_path / f"{name}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        files.append(path)
    assert dg.diagnose(files)["accuracies"] == {"a": 0.75, "b": 0.5}
    strict = dg.diagnose(files, extraction="strict")
    assert strict["accuracies"] == {"a": 0.5, "b": 0.5}
    assert strict["extraction"] == "strict"
    args = ["diagnose", "--answers", str(files[0]), "--answers", str(files[1]), "--json"]
    assert main([*args, "--extraction", "strict"]) == 0
    assert json.loads(capsys.readouterr().out)["accuracies"]["a"] == 0.5
    assert main(args) == 0
    assert json.loads(capsys.readouterr().out)["accuracies"]["a"] == 0.75
