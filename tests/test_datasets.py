"""Dataset loading (save_to_disk, parquet, json, jsonl), image errors and paired-view verification."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from PIL import Image

from corl_vl.data.datasets import FieldMap, load_problems
from corl_vl.data.images import open_image
from corl_vl.data.paired import load_paired_view, verify_paired_views
from corl_vl.data.problem import Problem
from corl_vl.errors import CorlError


@pytest.fixture(scope="module")
def data_dir(fixtures_dir: Path) -> Path:
    return fixtures_dir / "data"


def _png(color, size=(6, 4), mode="RGB") -> bytes:
    buffer = io.BytesIO()
    Image.new(mode, size, color).save(buffer, format="PNG")
    return buffer.getvalue()


# --- json / jsonl -------------------------------------------------------------------------------------------


def test_jsonl_with_image_paths(data_dir: Path):
    problems = load_problems(data_dir / "problems.jsonl")
    assert [p.id for p in problems] == ["q1", "q2", "q3"]
    assert [p.answer for p in problems] == ["1", "B", "5"]
    assert problems[1].question == "What colour is the square?"
    assert problems[1].choices == ["red", "blue", "green"] and problems[0].choices is None
    assert problems[0].images == [str(data_dir / "images" / "red.png")]  # lazy: a path, resolved
    assert problems[2].images == []
    assert problems[0].meta == {"level": 1}
    assert open_image(problems[1].images[0]).getpixel((0, 0)) == (0, 0, 255)


def test_corrupt_image_names_file_row_and_field(data_dir: Path):
    with pytest.raises(CorlError) as err:
        load_problems(data_dir / "corrupt_image.jsonl")
    message = str(err.value)
    assert "corrupt_image.jsonl row 1" in message and "'image'" in message
    assert "corrupt.png" in message and "corrupt" in message and "\n" not in message


def test_missing_image_names_file_row_and_field(data_dir: Path):
    with pytest.raises(CorlError) as err:
        load_problems(data_dir / "missing_image.jsonl")
    message = str(err.value)
    assert "missing_image.jsonl row 2" in message and "missing.png" in message and "not found" in message


def test_unchecked_images_fail_clearly_when_opened(data_dir: Path):
    problems = load_problems(data_dir / "corrupt_image.jsonl", check_images=False)
    assert open_image(problems[0].images[0]).size == (8, 8)
    with pytest.raises(CorlError, match=r"corrupt\.png is corrupt"):
        open_image(problems[1].images[0], where="row 1")


def test_image_root_overrides_the_files_folder(data_dir: Path, tmp_path: Path):
    (tmp_path / "images").mkdir()
    (tmp_path / "images" / "red.png").write_bytes(_png((1, 2, 3)))
    (tmp_path / "images" / "blue.png").write_bytes(_png((4, 5, 6)))
    problems = load_problems(data_dir / "problems.jsonl", image_root=tmp_path)
    assert open_image(problems[0].images[0]).getpixel((0, 0)) == (1, 2, 3)


def test_duplicate_ids_are_rejected(data_dir: Path):
    with pytest.raises(CorlError, match=r"duplicate_ids\.jsonl: duplicate id 'q1' \(rows 0 and 2\)"):
        load_problems(data_dir / "duplicate_ids.jsonl")


def test_missing_question_column_lists_columns(data_dir: Path):
    with pytest.raises(CorlError) as err:
        load_problems(data_dir / "no_question.jsonl")
    assert "no_question.jsonl" in str(err.value) and "columns: id, prompt_text, answer" in str(err.value)
    problems = load_problems(data_dir / "no_question.jsonl", fields=FieldMap(question="prompt_text"))
    assert problems[0].question == "hi"


def test_id_column_required_unless_row_index_asked(tmp_path: Path):
    path = tmp_path / "rows.json"
    path.write_text(json.dumps([{"question": "a?"}, {"question": "b?", "answer": 3}]))
    with pytest.raises(CorlError, match=r"no id column 'id'.*FieldMap\(id=None\)"):
        load_problems(path)
    problems = load_problems(path, fields=FieldMap(id=None))
    assert [(p.id, p.question, p.answer) for p in problems] == [("0", "a?", None), ("1", "b?", "3")]


def test_require_answer_names_the_row(data_dir: Path):
    assert len(load_problems(data_dir / "rephrased.jsonl")) == 3  # answers are optional by default
    with pytest.raises(CorlError, match=r"rephrased\.jsonl row 2 \(id 'q3'\): empty 'answer'"):
        load_problems(data_dir / "rephrased.jsonl", require_answer=True)
    with pytest.raises(CorlError, match="no answer column"):
        load_problems(
            data_dir / "no_question.jsonl",
            fields=FieldMap(question="prompt_text", answer=None),
            require_answer=True,
        )


def test_json_keyed_by_id_with_alternative_column_names(data_dir: Path):
    problems = load_problems(data_dir / "keyed.json")
    assert [(p.id, p.question, p.choices, p.answer) for p in problems] == [
        ("k1", "Which is larger?", ["3", "7"], "B"),
        ("k2", "What is 4 * 5?", None, "20"),
    ]


def test_limit_and_bad_json_lines(data_dir: Path, tmp_path: Path):
    assert [p.id for p in load_problems(data_dir / "problems.jsonl", limit=2)] == ["q1", "q2"]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "a", "question": "x"}\n{"id": "b", "question": \n')
    with pytest.raises(CorlError, match=r"bad\.jsonl:2: invalid JSON"):
        load_problems(bad)


def test_text_only_needs_a_text_rendering_for_pictures(data_dir: Path, tmp_path: Path):
    with pytest.raises(
        CorlError, match=r"problems\.jsonl row 0 \(id 'q1'\): has an image but no text rendering"
    ):
        load_problems(data_dir / "problems.jsonl", text_only=True)
    path = tmp_path / "t.jsonl"
    rows = [{"id": "a", "question": "How many?", "text_question": "Two dots. How many?", "image": "x.png"}]
    path.write_text(json.dumps(rows[0]) + "\n")
    (tmp_path / "x.png").write_bytes(_png((0, 0, 0)))
    problem = load_problems(path, text_only=True)[0]
    assert (problem.question, problem.images) == ("Two dots. How many?", [])


def test_unsupported_sources(tmp_path: Path):
    with pytest.raises(CorlError, match="no such file"):
        load_problems(tmp_path / "nope.jsonl")
    (tmp_path / "a.csv").write_text("id,question\n")
    with pytest.raises(CorlError, match="unsupported format"):
        load_problems(tmp_path / "a.csv")
    (tmp_path / "empty").mkdir()
    with pytest.raises(CorlError, match="neither a datasets save_to_disk folder nor a copy of a hub dataset"):
        load_problems(tmp_path / "empty")


# --- parquet and save_to_disk ------------------------------------------------------------------------------


def test_parquet_with_embedded_images(data_dir: Path):
    with pytest.raises(CorlError, match=r"problems\.parquet: no id column 'id'.*pid"):
        load_problems(data_dir / "problems.parquet")
    problems = load_problems(data_dir / "problems.parquet", fields=FieldMap(id="pid"))
    assert [(p.id, p.answer) for p in problems] == [("p1", "red"), ("p2", None)]
    assert problems[0].meta == {"source": "fixture"}
    image = open_image(problems[1].images[0])
    assert (image.mode, image.size, image.getpixel((3, 3))) == ("RGB", (12, 12), (0, 0, 255))
    assert problems[1].images[0].fp is not None  # the dataset's copy stays encoded (lazy) after opening
    with pytest.raises(CorlError, match="no split"):
        load_problems(data_dir / "problems.parquet", split="train", fields=FieldMap(id="pid"))


def test_save_to_disk_dataset_dict(tmp_path: Path):
    from datasets import Dataset, DatasetDict, Features, List, Value
    from datasets import Image as ImageFeature

    features = Features(
        {
            "id": Value("int64"),
            "prompt": Value("string"),
            "images": List(ImageFeature()),
            "answer": Value("string"),
        }
    )
    train = {"id": [1, 2], "prompt": ["p1", "p2"], "answer": ["1", "2"], "images": [[_as_pil((9, 9, 9))], []]}
    test = {"id": [3], "prompt": ["p3"], "answer": ["3"], "images": [[_as_pil((1, 1, 1), "RGBA")] * 2]}
    DatasetDict(
        {
            "train": Dataset.from_dict(train, features=features),
            "test": Dataset.from_dict(test, features=features),
        }
    ).save_to_disk(str(tmp_path / "dd"))

    with pytest.raises(CorlError, match="has splits train, test; choose one"):
        load_problems(tmp_path / "dd")
    with pytest.raises(CorlError, match=r"no split 'dev' \(splits: train, test\)"):
        load_problems(tmp_path / "dd", split="dev")
    train_problems = load_problems(tmp_path / "dd", split="train")
    assert [(p.id, p.question, p.answer, len(p.images)) for p in train_problems] == [
        ("1", "p1", "1", 1),
        ("2", "p2", "2", 0),
    ]
    assert open_image(train_problems[0].images[0]).getpixel((0, 0)) == (9, 9, 9)
    (test_problem,) = load_problems(tmp_path / "dd", split="test")
    assert [open_image(im).mode for im in test_problem.images] == ["RGB", "RGB"]  # RGBA converted

    Dataset.from_dict(train, features=features).save_to_disk(str(tmp_path / "single"))
    assert [p.id for p in load_problems(tmp_path / "single", limit=1)] == ["1"]
    with pytest.raises(CorlError, match="without splits"):
        load_problems(tmp_path / "single", split="train")


def _as_pil(color, mode="RGB"):
    return Image.new(mode, (5, 5), color if mode == "RGB" else (*color, 128))


def test_save_to_disk_with_corrupt_embedded_image(tmp_path: Path):
    from datasets import Dataset, Features, Value
    from datasets import Image as ImageFeature

    features = Features({"id": Value("string"), "question": Value("string"), "image": ImageFeature()})
    rows = {
        "id": ["a", "b"],
        "question": ["q", "q"],
        "image": [{"bytes": _png((0, 0, 0)), "path": None}, {"bytes": b"\x89PNG garbage", "path": None}],
    }
    Dataset.from_dict(rows, features=features).save_to_disk(str(tmp_path / "d"))
    with pytest.raises(CorlError, match=r"row 1 field 'image': embedded image is corrupt"):
        load_problems(tmp_path / "d")


def test_open_image_errors(tmp_path: Path):
    assert open_image(_png((1, 2, 3), mode="RGB")).getpixel((0, 0)) == (1, 2, 3)
    assert open_image(_as_pil((1, 2, 3), "RGBA")).mode == "RGB"
    with pytest.raises(CorlError, match=r"^here: image file .*gone\.png not found$"):
        open_image(tmp_path / "gone.png", where="here")
    with pytest.raises(CorlError, match="embedded image is corrupt"):
        open_image(b"not an image")


# --- paired views -------------------------------------------------------------------------------------------


def test_paired_view_aligned_inherits_images_and_answers(data_dir: Path):
    original = load_problems(data_dir / "problems.jsonl")
    view = load_paired_view(original, data_dir / "rephrased.jsonl")
    assert [p.id for p in view] == ["q1", "q2", "q3"]
    assert view[2].question.startswith("Ann has 2 apples")
    assert view[0].images == original[0].images  # the rephrase has no image column: the picture carries over
    assert view[1].choices == ["red", "blue", "green"]
    assert view[2].answer == "5" and view[0].meta == {"level": 1}


def test_shuffled_rephrase_is_rejected(data_dir: Path):
    original = load_problems(data_dir / "problems.jsonl")
    with pytest.raises(
        CorlError, match=r"rephrased_shuffled\.jsonl row 0: id 'q2' where the original has 'q1'"
    ):
        load_paired_view(original, data_dir / "rephrased_shuffled.jsonl")


def test_rephrase_with_a_different_answer_is_rejected(data_dir: Path):
    original = load_problems(data_dir / "problems.jsonl")
    with pytest.raises(CorlError, match=r"row 1 \(id 'q2'\): answer 'C' differs from the original 'B'"):
        load_paired_view(original, data_dir / "rephrased_wrong_answer.jsonl")


def test_verify_counts_ids_and_options():
    original = [Problem("a", "x", answer="1"), Problem("b", "y", choices=["p", "q"])]
    verify_paired_views(original, [Problem("a", "x'"), Problem("b", "y'", choices=["p'", "q'"])], source="s")
    with pytest.raises(CorlError, match="s: 1 problems, but the original view has 2"):
        verify_paired_views(original, original[:1], source="s")
    with pytest.raises(
        CorlError, match=r"s row 1: id 'c' where the original has 'b' \(id not in the original\)"
    ):
        verify_paired_views(original, [original[0], Problem("c", "y")], source="s")
    with pytest.raises(CorlError, match=r"s row 1 \(id 'b'\): 3 options, the original has 2"):
        verify_paired_views(original, [original[0], Problem("b", "y", choices=["1", "2", "3"])], source="s")
    verify_paired_views(original, [Problem("a", "x", answer=" 1 "), original[1]], source="s")  # spacing only
