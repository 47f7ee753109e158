"""Benchmark loaders: local folders and files in the official formats, ids, images and clear errors."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from PIL import Image

from corl_vl.errors import CorlError
from corl_vl.eval.benchmarks import BENCHMARKS
from corl_vl.eval.benchmarks.mathverse import parse_choices
from corl_vl.eval.benchmarks.text import competition_problem, gpqa_problem, gsm8k_problem, shuffled_options
from corl_vl.eval.loaders import RowContext, load_benchmark
from corl_vl.eval.scoring import SCORERS


def test_every_benchmark_has_a_scorer():
    assert set(BENCHMARKS) == set(SCORERS)


def test_record_ids_and_fields(fixtures_dir):
    root = fixtures_dir / "eval"
    vista = load_benchmark("mathvista", root / "mathvista" / "testmini.json", annotations_only=True)
    assert [p.id for p in vista][:3] == ["1", "2", "3"]
    assert vista[2].choices == ["135°", "140°", "145°", "150°"] and vista[2].answer == "145°"
    assert vista[0].meta["precision"] == 1 and vista[0].question.endswith("with 1 decimal place.")
    verse = load_benchmark("mathverse", root / "mathverse", annotations_only=True)
    assert verse[0].id == "1" and verse[0].meta["problem_version"] == "Text Only"
    wemath = load_benchmark("wemath", root / "we-math", annotations_only=True)
    assert wemath[0].id == "2steps_1/2steps_1" and wemath[0].meta["step"] == "1"
    assert wemath[0].choices == ["300, 400", "400, 300", "3000, 4000", "4000, 3000", "No correct answer"]
    mathv = load_benchmark("mathvision", root / "math-v" / "testmini.jsonl", annotations_only=True)
    assert mathv[2].id == "6" and mathv[2].choices == ["A", "B", "C", "D", "E"] and mathv[1].choices is None
    math500 = load_benchmark("math500", root / "math500", limit=3)
    assert [p.id for p in math500] == [
        "test/precalculus/807.json",
        "test/intermediate_algebra/1994.json",
        "test/algebra/2584.json",
    ]
    assert math500[0].meta["subject"] == "precalculus" and math500[2].answer == "\\frac{14}{3}"


def test_images_are_resolved_relative_to_the_annotation_folder(fixtures_dir, tmp_path):
    src = fixtures_dir / "eval" / "math-v"
    rows = [json.loads(line) for line in (src / "testmini.jsonl").read_text().splitlines()]
    (tmp_path / "testmini.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in rows if r["id"] in {"16", "38"})
    )
    shutil.copytree(src / "images", tmp_path / "images")
    problems = load_benchmark("mathvision", tmp_path)
    assert [p.images for p in problems] == [
        [tmp_path / "images" / "16.jpg"],
        [tmp_path / "images" / "38.jpg"],
    ]


def test_missing_image_names_the_record_unless_annotations_only(fixtures_dir):
    with pytest.raises(CorlError, match=r"testmini\.jsonl record 4 field 'image': image file not found"):
        load_benchmark("mathvision", fixtures_dir / "eval" / "math-v")
    with pytest.raises(CorlError, match=r"record 2steps_1/2steps_1 field 'image_path'"):
        load_benchmark("wemath", fixtures_dir / "eval" / "we-math")
    assert len(load_benchmark("mathvision", fixtures_dir / "eval" / "math-v", annotations_only=True)) == 14


def test_embedded_image_bytes_are_kept_lazily(tmp_path):
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq

    buf = io.BytesIO()
    Image.new("RGB", (4, 3), "red").save(buf, format="PNG")
    table = pa.table(
        {
            "id": ["a"],
            "question": ["q"],
            "options": [[]],
            "answer": ["1"],
            "level": [1],
            "subject": ["s"],
            "decoded_image": [{"bytes": buf.getvalue(), "path": None}],
        }
    )
    pq.write_table(table, tmp_path / "testmini-00000-of-00001.parquet")
    (problem,) = load_benchmark("mathvision", tmp_path)
    assert isinstance(problem.images[0], Image.Image) and problem.images[0].size == (4, 3)


def test_bad_input_is_one_clear_error(fixtures_dir, tmp_path):
    bad = tmp_path / "testmini.jsonl"
    bad.write_text('{"id": "1", "question": "q", "answer": "2"}\n{"id": "2", "answer": "3"}\n')
    with pytest.raises(CorlError, match=r"testmini\.jsonl record 2: missing field 'question'"):
        load_benchmark("mathvision", bad, annotations_only=True)
    bad.write_text(
        '{"id": "1", "question": "q", "answer": "2"}\n{"id": "1", "question": "q", "answer": "2"}\n'
    )
    with pytest.raises(CorlError, match="record 1: duplicate id"):
        load_benchmark("mathvision", bad, annotations_only=True)
    bad.write_text('{"id": "1"\n')
    with pytest.raises(CorlError, match=":1: invalid JSON"):
        load_benchmark("mathvision", bad, annotations_only=True)
    with pytest.raises(CorlError, match="unknown benchmark 'mathvistaa'"):
        load_benchmark("mathvistaa", bad)
    with pytest.raises(CorlError, match="does not exist"):
        load_benchmark("mathvision", tmp_path / "nope")
    with pytest.raises(CorlError, match="no annotation file for mathvision split 'test'"):
        load_benchmark("mathvision", fixtures_dir / "eval" / "math-v", split="test")


def test_mathverse_choices_from_question_text():
    assert parse_choices("Find x.\nChoices:\nA:40°\nB:60°") == ["40°", "60°"]
    assert parse_choices("True or false?\nChoice:\nA. True\nB. False") == ["True", "False"]
    assert parse_choices("Find x.") is None


def _ctx(index: int = 0) -> RowContext:
    return RowContext(source="rows.jsonl", index=index, root=Path("."), annotations_only=True)


def test_text_benchmark_rows():
    amc = competition_problem({"id": 7, "problem": "How many?", "answer": 142.0, "url": "u"}, _ctx())
    assert (amc.id, amc.answer) == ("7", "142")
    gsm = gsm8k_problem({"question": "Sum?", "answer": "2 + 3 = <<2+3=5>>5\n#### 1,005"}, _ctx(4))
    assert (gsm.id, gsm.answer) == ("test-4", "1005")
    row = {
        "Record ID": "recX",
        "Question": "Which gas?",
        "Correct Answer": "argon",
        "Incorrect Answer 1": "neon",
        "Incorrect Answer 2": "xenon",
        "Incorrect Answer 3": "radon",
    }
    gpqa = gpqa_problem(row, _ctx())
    assert sorted(gpqa.choices) == ["argon", "neon", "radon", "xenon"]
    assert gpqa.choices[ord(gpqa.answer) - ord("A")] == "argon"
    assert gpqa_problem(row, _ctx(9)).choices == gpqa.choices  # fixed seed: same order every load
    orders = {tuple(shuffled_options(f"r{i}", "c", ["w1", "w2", "w3"])[0]) for i in range(20)}
    assert len(orders) > 1  # but not the same order for every record
    with pytest.raises(CorlError, match=r"rows\.jsonl record recX: missing field 'Incorrect Answer 3'"):
        gpqa_problem({k: v for k, v in row.items() if k != "Incorrect Answer 3"}, _ctx())


def test_hub_path_with_a_local_stand_in_for_the_hub(monkeypatch):
    """The hub code path, with ``datasets.load_dataset`` answering from memory (no network here)."""
    import io

    import datasets

    buf = io.BytesIO()
    Image.new("RGB", (5, 2), "blue").save(buf, format="PNG")
    features = datasets.Features(
        {
            "id": datasets.Value("string"),
            "question": datasets.Value("string"),
            "options": datasets.Sequence(datasets.Value("string")),
            "answer": datasets.Value("string"),
            "level": datasets.Value("int64"),
            "subject": datasets.Value("string"),
            "decoded_image": datasets.Image(),
        }
    )
    table = {
        "id": ["1"],
        "question": ["q"],
        "options": [["x", "y"]],
        "answer": ["B"],
        "level": [2],
        "subject": ["logic"],
        "decoded_image": [{"bytes": buf.getvalue(), "path": None}],
    }
    calls = []

    def fake_load_dataset(path, name=None, split=None):
        calls.append((path, name, split))
        return datasets.Dataset.from_dict(table, features=features)

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    (full,) = load_benchmark("mathvision", split="test")
    assert calls == [("MathLLMs/MathVision", None, "test")]
    assert full.images[0].size == (5, 2) and full.choices == ["x", "y"] and full.meta["level"] == "2"
    (light,) = load_benchmark("mathvision", annotations_only=True)
    assert light.images == [] and calls[-1][2] == "testmini"

    def failing(path, name=None, split=None):
        raise ConnectionError("offline\nmore detail")

    monkeypatch.setattr(datasets, "load_dataset", failing)
    with pytest.raises(
        CorlError,
        match=r"cannot load gpqa from the hub \(hub:Idavidrein/gpqa/gpqa_diamond:train\): "
        r"offline; pass --data",
    ):
        load_benchmark("gpqa")
