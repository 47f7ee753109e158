"""Issue 45 (round 3): hostile inputs to data, eval and grade. Each is one line naming the file (and row and field),
exit 2, nothing written, and nothing blocks: a FIFO or device where a file is expected is refused before it is
opened (a hang here fails the test through the alarm below instead of stalling the suite)."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
from hub_standins import write_math

from corl_vl.cli import main
from corl_vl.data.datasets import load_problems
from corl_vl.data.images import open_image
from corl_vl.errors import CorlError
from corl_vl.eval.loaders import load_benchmark

DEEP = "[" * 100_000 + "]" * 100_000


class Hung(Exception):
    pass


@pytest.fixture(autouse=True)
def _no_hang():
    """A FIFO open blocks in the kernel; SIGALRM's exception ends it, so a regression fails instead of hanging."""

    def expire(*_):
        raise Hung("blocked on a FIFO or an endless file")  # not an OSError: no reader may catch it

    old = signal.signal(signal.SIGALRM, expire)
    signal.alarm(60)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


def _one_line(capsys: pytest.CaptureFixture[str], *named: str) -> str:
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "Traceback" not in err, err
    assert all(n in err for n in named), err
    return err


def test_deeply_nested_json_line_names_file_and_line(tmp_path, capsys):
    data = tmp_path / "responses.jsonl"
    data.write_text(json.dumps({"response": "5", "answer": "5"}) + "\n" + '{"response": ' + DEEP + "}\n")
    assert main(["grade", "--input", str(data), "--output", str(tmp_path / "out.jsonl")]) == 2
    _one_line(capsys, f"{data}:2", "nested")
    assert not (tmp_path / "out.jsonl").exists()
    with pytest.raises(CorlError, match=r"problems\.jsonl:1: JSON nested"):
        (tmp_path / "problems.jsonl").write_text('{"id": "a", "question": ' + DEEP + "}\n")
        load_problems(tmp_path / "problems.jsonl")
    (tmp_path / "rows.json").write_text(DEEP)
    with pytest.raises(CorlError, match=r"rows\.json: JSON nested"):
        load_problems(tmp_path / "rows.json")


def test_fifo_or_device_as_an_image_is_refused_before_opening(tmp_path, capsys):
    fifo = tmp_path / "picture.png"
    os.mkfifo(fifo)
    rows = tmp_path / "problems.jsonl"
    rows.write_text(json.dumps({"id": "a", "question": "q", "images": [str(fifo)]}) + "\n")
    with pytest.raises(CorlError, match=r"problems.jsonl row 0 field 'images'.*FIFO"):
        load_problems(rows)
    with pytest.raises(CorlError, match="FIFO"):
        open_image(str(fifo), where="row 3")
    rows.write_text(json.dumps({"id": "a", "question": "q", "images": ["/dev/zero"]}) + "\n")
    with pytest.raises(CorlError, match="device"):
        load_problems(rows)


@pytest.mark.parametrize("suffix", [".jsonl", ".json", ".parquet"])
def test_fifo_as_a_data_file_is_refused(tmp_path, suffix):
    os.mkfifo(tmp_path / f"train{suffix}")
    with pytest.raises(CorlError, match="FIFO"):
        load_problems(tmp_path / f"train{suffix}")


@pytest.mark.parametrize("where", ["--data", "a folder's annotation file"])
def test_fifo_as_an_eval_annotation_file_is_named_a_fifo_not_missing(tmp_path, where):
    fifo = tmp_path / "testmini.json"
    os.mkfifo(fifo)
    with pytest.raises(
        CorlError, match=r"testmini.json: is a FIFO \(named pipe\), not a regular annotation file"
    ):
        load_benchmark("mathvista", fifo if where == "--data" else tmp_path, annotations_only=True)


@pytest.mark.parametrize("kind", ["fifo", "/dev/zero", "/dev/urandom", "latin-1"])
def test_config_that_is_no_plain_utf8_file_is_refused(tmp_path, monkeypatch, capsys, kind):
    monkeypatch.chdir(tmp_path)
    path = str(tmp_path / "cohort.yaml")
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "latin-1":
        Path(path).write_bytes("agents: []\n# café\n".encode("latin-1"))
    else:
        path = kind
    argv = ["launch", "--nodes", "1", "--gpus-per-node", "1", "--config", path]
    assert main(argv) == 2
    _one_line(capsys, path, "UTF-8" if kind == "latin-1" else "not a regular config")
    assert sorted(p.name for p in tmp_path.iterdir()) == (["cohort.yaml"] if "cohort" in path else [])


@pytest.mark.parametrize("what", ["a file", "a file below it"])
def test_cache_variable_naming_a_file_is_one_line(tmp_path, monkeypatch, capsys, what):
    blocker = tmp_path / "cache"
    blocker.write_text("not a folder")
    target = blocker if what == "a file" else blocker / "sub"
    monkeypatch.setenv("CORL_VL_CACHE", str(target))
    assert main(["theory", "--example", "complementary"]) == 2
    _one_line(capsys, "CORL_VL_CACHE")
    assert blocker.read_text() == "not a folder"


def test_synth_never_clobbers_the_current_folder_a_file_or_a_foreign_folder(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "notes.txt").write_text("mine")
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "keep.py").write_text("mine")
    synth = ["data", "synth", "--n", "2"]
    for out in (".", "./", str(tmp_path), "..", "notes.txt", "work"):
        for flags in ([], ["--overwrite"]):
            assert main([*synth, "--out", out, *flags]) == 2
            _one_line(capsys, "--out")
    assert (tmp_path / "notes.txt").read_text() == "mine" and (
        tmp_path / "work" / "keep.py"
    ).read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt", "work"]
    for command in (
        ["data", "prepare", "math-l3-5"],
        ["data", "rephrase", "--model", "m", "--data", "d.jsonl"],
    ):
        assert main([*command, "--out", ".", "--overwrite"]) == 2  # refused before reading any data or model
        _one_line(capsys, "--out .")
    (
        tmp_path / "empty"
    ).mkdir()  # an empty folder is written into; a dataset needs --overwrite to be replaced
    assert main([*synth, "--out", "empty"]) == 0
    assert main([*synth, "--out", "empty"]) == 2 and main([*synth, "--out", "empty", "--overwrite"]) == 0
    assert len(load_problems("empty", split="train")) == 2


BAD_ANSWERS = [float("nan"), float("inf"), True, [1, 2], {"a": 1}, None]


@pytest.mark.parametrize("answer", BAD_ANSWERS, ids=lambda v: type(v).__name__ + str(v)[:3])
def test_gold_answer_that_is_not_text_is_refused_naming_file_row_field(tmp_path, capsys, answer):
    rows = [
        {"id": "1", "response": "\\boxed{5}", "answer": "5"},
        {"id": "2", "response": "5", "answer": answer},
    ]
    data = tmp_path / "responses.jsonl"
    data.write_text(
        "".join(json.dumps(r) + "\n" for r in rows)
    )  # NaN / Infinity as Python's json writes them
    out = tmp_path / "graded.jsonl"
    assert main(["grade", "--input", str(data), "--output", str(out), "--workers", "1"]) == 2
    _one_line(capsys, f"{data}:2", "'answer'")
    assert not out.exists()
    gold = tmp_path / "gold.jsonl"
    gold.write_text("".join(json.dumps({"id": r["id"], "answer": r["answer"]}) + "\n" for r in rows))
    answers = [tmp_path / "a.jsonl", tmp_path / "b.jsonl"]
    for path in answers:
        path.write_text('{"id": "1", "extracted": "5"}\n{"id": "2", "extracted": "5"}\n')
    assert (
        main(["diagnose", "--answers", str(answers[0]), "--answers", str(answers[1]), "--gold", str(gold)])
        == 2
    )
    _one_line(capsys, f"{gold}:2", "'answer'")
    bench = tmp_path / "math500.jsonl"
    bench.write_text(
        "".join(
            json.dumps({"unique_id": r["id"], "problem": "q", "answer": r["answer"]}) + "\n" for r in rows
        )
    )
    with pytest.raises(CorlError, match="'answer'"):
        load_benchmark("math500", bench)
    problems = tmp_path / "problems.jsonl"
    problems.write_text(
        "".join(json.dumps({"id": r["id"], "question": "q", "answer": r["answer"]}) + "\n" for r in rows)
    )
    if answer is not None:  # a missing answer is allowed in training data (label-free), refused when required
        with pytest.raises(CorlError, match="row 1 field 'answer'"):
            load_problems(problems)
    else:
        with pytest.raises(CorlError, match="row 1"):
            load_problems(problems, require_answer=True)


def test_prepare_leaves_out_rows_whose_solution_has_no_boxed_answer(tmp_path, capsys):
    """A solution without \\boxed{} has no answer: never its last sentence (or all of it) as the gold answer."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    source = write_math(tmp_path / "hub-copy", n=10)
    shard = next(source.rglob("*.parquet"))  # rewrite the hub copy's shard: rows 3 and 4 box nothing
    table = pq.read_table(shard).to_pylist()
    for i in (3, 4):
        table[i]["solution"] = f"We add them. The total is {2 * i}."
    pq.write_table(pa.Table.from_pylist(table, schema=pq.read_schema(shard)), shard)
    by_id = {p.id: p.answer for p in load_problems(source)}
    assert by_id["3"] is None and by_id["4"] is None and by_id["2"] == "4"
    out = tmp_path / "math-l3-5"
    assert main(["data", "prepare", "math-l3-5", "--source", str(source), "--out", str(out)]) == 0
    captured = capsys.readouterr()
    assert "left out 2 of 6 rows" in captured.err and "math-l3-5: 4 problems" in captured.out
    assert [(p.id, p.answer) for p in load_problems(out)] == [
        ("2", "4"),
        ("7", "14"),
        ("8", "16"),
        ("9", "18"),
    ]


@pytest.mark.parametrize("kind", ["fifo", "/dev/zero", "a list", "nested", "missing"])
def test_a_deepspeed_file_that_is_no_plain_json_object_is_one_line(tmp_path, capsys, kind):
    path = str(tmp_path / "zero2.json")
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "a list":
        Path(path).write_text("[1]")
    elif kind == "nested":
        Path(path).write_text(DEEP)
    elif kind == "/dev/zero":
        path = kind
    argv = [
        "plan",
        "--gpus",
        "2",
        "--gpu-memory",
        "80GB",
        "--config",
        str(Path(__file__).parents[1] / "configs/demo.yaml"),
    ]
    assert main([*argv, "--set", f"distributed.deepspeed={path}"]) == 2
    _one_line(capsys, "distributed.deepspeed", path)
