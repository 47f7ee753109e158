"""Synthetic visual math: determinism, answers recomputed from the stored parameters, splits, text view, CLI.

Answers are recomputed here from ``meta["params"]`` with code written for the test, never with the
generator's own rendering code.
"""

from __future__ import annotations

import io
import json
import math
from collections import Counter
from pathlib import Path

import pytest
from PIL import Image

from corl_vl.cli import main
from corl_vl.data.synth import SIZE, SKILLS, generate_problems, problem_split, to_text_problem, write_dataset
from corl_vl.errors import CorlError

ALL_SKILLS = {"count_shapes", "add_numbers", "compare_bars", "read_chart", "polygon_sides"}
MULTIPLE_CHOICE = {"compare_bars", "polygon_sides"}
SIDE_NAMES = {3: "triangle", 4: "square", 5: "pentagon", 6: "hexagon"}
PALETTE = {
    "red": (220, 40, 40),
    "blue": (40, 90, 220),
    "green": (30, 150, 60),
    "orange": (240, 140, 20),
    "purple": (140, 60, 180),
}


@pytest.fixture(scope="module")
def train():
    return generate_problems(100, seed=11)


def _png(image: Image.Image) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def _expected_answer(skill: str, params: dict, choices: list[str] | None) -> str:
    """Independent recomputation of the gold answer from the generator's parameters."""
    if skill == "count_shapes":
        return str(sum(1 for _, shape, color in params["objects"] if [shape, color] == params["target"]))
    if skill == "add_numbers":
        values = [value for _, value, _ in params["numbers"]]
        return str(sum(values) if params["op"] == "sum" else max(values) - min(values))
    if skill == "read_chart":
        return str(params["values"][params["target"]])
    if skill == "compare_bars":
        pairs = list(zip(params["heights"], params["labels"]))
        label = (max(pairs) if params["which"] == "tallest" else min(pairs))[1]
        return chr(ord("A") + choices.index(label))
    if skill == "polygon_sides":
        total = sum(sides for _, sides, _, _ in params["shapes"])
        return chr(ord("A") + choices.index(str(total)))
    raise AssertionError(skill)


def test_every_skill_is_present_in_equal_shares(train):
    assert set(SKILLS) == ALL_SKILLS
    assert Counter(p.meta["skill"] for p in train) == {name: 20 for name in ALL_SKILLS}


def test_answers_recompute_from_params(train):
    for p in train:
        assert p.answer == _expected_answer(p.meta["skill"], p.meta["params"], p.choices), p.id


def test_records_have_the_documented_shape(train):
    for i, p in enumerate(train):
        assert p.id == f"synth-train-11-{i:06d}"
        assert len(p.images) == 1
        image = p.images[0]
        assert image.mode == "RGB" and image.size == (SIZE, SIZE)
        assert 128 <= SIZE <= 192
        if p.meta["skill"] in MULTIPLE_CHOICE:
            assert p.choices is not None and len(p.choices) >= 3
            assert len(set(p.choices)) == len(p.choices)
            assert p.answer in "ABCDEFGH"[: len(p.choices)]
        else:
            assert p.choices is None
            assert p.answer.lstrip("-").isdigit()
    assert {p.choices is None for p in train} == {True, False}  # both free-form and multiple choice


def test_count_shapes_picture_matches_params(train):
    """Each occupied grid cell's centre has the shape's colour; empty cells are white."""
    for p in (p for p in train if p.meta["skill"] == "count_shapes"):
        image, params = p.images[0], p.meta["params"]
        step = SIZE // 4
        occupied = {cell: color for cell, _, color in params["objects"]}
        for cell in range(16):
            centre = ((cell % 4) * step + step // 2, (cell // 4) * step + step // 2 + 4)
            expected = PALETTE[occupied[cell]] if cell in occupied else (255, 255, 255)
            assert image.getpixel(centre) == expected, (p.id, cell)
        target_shape, target_color = params["target"]
        assert f"{target_color} {target_shape}s" in p.question


def test_bar_heights_in_picture_follow_params(train):
    """The tallest bar (most coloured pixels in its column) is the one with the largest height."""
    for p in (p for p in train if p.meta["skill"] == "compare_bars"):
        image, heights = p.images[0], p.meta["params"]["heights"]
        width = SIZE // len(heights)
        filled = []
        for i in range(len(heights)):
            x = i * width + width // 2
            filled.append(
                sum(1 for y in range(SIZE) if image.getpixel((x, y)) not in ((255, 255, 255), (0, 0, 0)))
            )
        assert filled.index(max(filled)) == heights.index(max(heights)), p.id


def test_deterministic_by_seed():
    a, b = generate_problems(15, seed=5), generate_problems(15, seed=5)
    for x, y in zip(a, b):
        assert (x.id, x.question, x.answer, x.choices, x.meta) == (
            y.id,
            y.question,
            y.answer,
            y.choices,
            y.meta,
        )
        assert x.images[0].tobytes() == y.images[0].tobytes()
        assert _png(x.images[0]) == _png(y.images[0])
    other = generate_problems(15, seed=6)
    assert [p.meta["params"] for p in other] != [p.meta["params"] for p in a]
    assert sum(x.images[0].tobytes() != y.images[0].tobytes() for x, y in zip(a, other)) >= 10
    # Problem i depends only on (seed, split, i): a shorter run is a prefix of a longer one.
    assert [p.meta for p in generate_problems(6, seed=5)] == [p.meta for p in a[:6]]


def test_splits_are_disjoint():
    def keys(problems):
        return {json.dumps([p.meta["skill"], p.meta["params"]], sort_keys=True) for p in problems}

    def qap(problems):
        return {(p.question, p.answer, json.dumps(p.meta["params"], sort_keys=True)) for p in problems}

    train = generate_problems(400, seed=0) + generate_problems(200, seed=1)
    test = generate_problems(150, seed=0, split="test") + generate_problems(150, seed=1, split="test")
    assert keys(train).isdisjoint(keys(test))
    assert qap(train).isdisjoint(qap(test))
    assert {p.id for p in train}.isdisjoint({p.id for p in test})
    assert len(keys(test)) > 250  # test problems are varied, not a handful repeated


def test_the_validation_split_never_holds_a_test_problem_and_leaves_train_and_test_as_they_were():
    def keys(problems):
        return {json.dumps([p.meta["skill"], p.meta["params"]], sort_keys=True) for p in problems}

    validation = generate_problems(300, seed=0, split="validation")
    test = generate_problems(300, seed=0, split="test")
    assert keys(validation).isdisjoint(keys(test)) and len(keys(validation)) > 250
    assert all(p.id.startswith("synth-validation-0-") for p in validation)
    assert {problem_split(p.meta["skill"], p.meta["params"]) for p in validation} == {"train"}
    # train and test are drawn exactly as before the validation split existed (pinned parameter draws)
    first = {
        s: json.dumps(generate_problems(1, seed=0, split=s)[0].meta["params"]) for s in ("train", "test")
    }
    assert first == PINNED_FIRST_DRAWS, first


def test_splits_are_disjoint_even_for_a_tiny_parameter_space(monkeypatch):
    """Ten possible problems, drawn hundreds of times per split: only the split partition keeps them apart."""
    from corl_vl.data.synth_skills import Rendered, Skill

    def render(params):
        return Rendered(Image.new("RGB", (SIZE, SIZE)), f"k={params['k']}?", "t", str(params["k"]), None)

    monkeypatch.setitem(SKILLS, "tiny", Skill("tiny", False, lambda rng: {"k": rng.randint(0, 9)}, render))
    train = {p.answer for p in generate_problems(200, seed=0, skills=["tiny"])}
    test = {p.answer for p in generate_problems(200, seed=1, split="test", skills=["tiny"])}
    assert train and test and train.isdisjoint(test) and len(train | test) == 10


def test_text_rendering_carries_the_numbers(train):
    for p in train:
        t = to_text_problem(p)
        assert (t.id, t.answer, t.choices, t.images) == (p.id, p.answer, p.choices, [])
        assert t.question == p.meta["text_question"] and t.question.endswith(p.question)
        params, skill = p.meta["params"], p.meta["skill"]
        if skill == "count_shapes":
            shape, color = params["target"]
            mentions = t.question.count(f" {color} {shape},") + t.question.count(f" {color} {shape}.")
            mentions += t.question.count(f" {color} {shape} and")
            assert mentions == int(p.answer), t.question
        elif skill == "add_numbers":
            for _, value, _ in params["numbers"]:
                assert str(value) in t.question
        elif skill in ("compare_bars", "read_chart"):
            values = params["heights"] if skill == "compare_bars" else params["values"]
            for label, value in zip(params["labels"], values):
                assert f"{label} {value}" in t.question
        else:
            for _, sides, color, _ in params["shapes"]:
                assert f"{color} {SIDE_NAMES[sides]}" in t.question
    with pytest.raises(CorlError, match="no text rendering"):
        to_text_problem(type(train[0])(id="x", question="q"))


def test_bad_arguments():
    with pytest.raises(CorlError, match="unknown synthetic skill"):
        generate_problems(3, seed=0, skills=["juggling"])
    with pytest.raises(CorlError, match="unknown split"):
        generate_problems(3, seed=0, split="dev")
    assert [p.meta["skill"] for p in generate_problems(4, seed=0, skills=["read_chart"])] == [
        "read_chart"
    ] * 4


def test_write_dataset_round_trip(tmp_path: Path):
    from datasets import load_from_disk

    from corl_vl.data.datasets import load_problems

    splits = {"train": generate_problems(10, seed=2), "test": generate_problems(4, seed=2, split="test")}
    out = write_dataset(splits, tmp_path / "synth")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["synth"]  # no temporary folder left behind
    loaded = load_from_disk(str(out))
    assert set(loaded) == {"train", "test"} and (len(loaded["train"]), len(loaded["test"])) == (10, 4)
    assert {"id", "question", "text_question", "image", "choices", "answer", "skill", "params"} <= set(
        loaded["train"].column_names
    )
    row = loaded["test"][3]
    original = splits["test"][3]
    assert row["params"] == original.meta["params"] and row["answer"] == original.answer
    assert row["image"].convert("RGB").tobytes() == original.images[0].tobytes()

    problems = load_problems(out, split="train")
    assert [p.id for p in problems] == [p.id for p in splits["train"]]
    assert [p.meta["params"] for p in problems] == [p.meta["params"] for p in splits["train"]]
    assert problems[2].choices == splits["train"][2].choices
    texts = load_problems(out, split="train", text_only=True)
    assert [t.question for t in texts] == [p.meta["text_question"] for p in splits["train"]]
    assert all(t.images == [] for t in texts)

    with pytest.raises(CorlError, match="already exists"):
        write_dataset(splits, out)
    write_dataset({"train": splits["train"][:3], "test": []}, out, overwrite=True)
    assert len(load_from_disk(str(out))["train"]) == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["synth"]


def test_cli_writes_a_loadable_dataset(tmp_path: Path, capsys):
    from datasets import load_from_disk

    out = tmp_path / "ds"
    assert (
        main(
            [
                "data",
                "synth",
                "--out",
                str(out),
                "--n",
                "10",
                "--seed",
                "4",
                "--skills",
                "add_numbers,read_chart",
            ]
        )
        == 0
    )
    printed = capsys.readouterr().out
    assert "add_numbers" in printed and "read_chart" in printed and "count_shapes" not in printed
    loaded = load_from_disk(str(out))
    assert (len(loaded["train"]), len(loaded["test"])) == (10, 2)  # default --test-n is N // 4
    assert loaded["train"]["id"] == [
        p.id for p in generate_problems(10, seed=4, skills=["add_numbers", "read_chart"])
    ]
    assert main(["data", "synth", "--out", str(out), "--n", "2"]) == 2  # exists, no --overwrite
    assert main(["data", "synth", "--out", str(tmp_path / "x"), "--n", "2", "--skills", "nope"]) == 2
    assert "unknown" in capsys.readouterr().err


# --- the extra single-shape skills (selected by name; not in the default set) ---------------------------

SHAPE_PALETTE = {
    "red": (220, 40, 40),
    "orange": (240, 140, 20),
    "yellow": (230, 210, 30),
    "green": (30, 150, 60),
    "blue": (40, 90, 220),
    "purple": (140, 60, 180),
}
ALL_SIDE_NAMES = {3: "triangle", 4: "square", 5: "pentagon", 6: "hexagon", 7: "heptagon", 8: "octagon"}


@pytest.fixture(scope="module")
def shapes():
    return generate_problems(60, seed=3, skills=["shape_color", "shape_sides"])


def test_extra_skills_are_opt_in_and_answers_recompute(shapes):
    assert {p.meta["skill"] for p in generate_problems(50, seed=0)} == ALL_SKILLS  # default unchanged
    assert Counter(p.meta["skill"] for p in shapes) == {"shape_color": 30, "shape_sides": 30}
    for p in shapes:
        params = p.meta["params"]
        expected = params["color"] if p.meta["skill"] == "shape_color" else str(params["sides"])
        assert p.answer == expected and p.choices is None, p.id
        assert f"{params['color']} {ALL_SIDE_NAMES[params['sides']]}." in p.meta["text_question"]
        assert p.meta["text_question"].endswith(p.question)
    assert {p.answer for p in shapes if p.meta["skill"] == "shape_color"} == set(SHAPE_PALETTE)
    assert {p.answer for p in shapes if p.meta["skill"] == "shape_sides"} == {str(n) for n in ALL_SIDE_NAMES}


def test_shape_picture_follows_params(shapes):
    """The centre has the shape's colour and the filled area is the regular polygon's (n/2)·r²·sin(2π/n)."""
    for p in shapes:
        image, params = p.images[0], p.meta["params"]
        w, h = image.size
        assert (
            image.getpixel((w // 2 + params["dx"], h // 2 + params["dy"])) == SHAPE_PALETTE[params["color"]]
        )
        data = image.tobytes()
        filled = sum(1 for i in range(0, len(data), 3) if data[i : i + 3] != b"\xff\xff\xff")
        n, r = params["sides"], params["radius"]
        area = n / 2 * r * r * math.sin(2 * math.pi / n)
        assert abs(filled - area) < 0.05 * area, (p.id, filled, area)


def test_systematic_mistakes_are_consistent_and_wrong(shapes):
    from corl_vl.data.synth import get_skill

    colors = list(SHAPE_PALETTE)
    for p in shapes:
        params, skill = p.meta["params"], p.meta["skill"]
        wrong = get_skill(skill).mistake(params)
        if skill == "shape_color":
            assert wrong == colors[(colors.index(params["color"]) + 1) % 6]
        else:
            assert wrong == str(params["sides"] + 1 if params["sides"] < 8 else 3)
        assert wrong != p.answer
    assert get_skill("read_chart").mistake is None
    with pytest.raises(CorlError, match="unknown synthetic skill"):
        get_skill("juggling")


# The first train and test draws of seed 0, as generated before the validation split was added.
PINNED_FIRST_DRAWS = {
    "train": '{"target": ["triangle", "orange"], "objects": [[1, "triangle", "orange"], [8, "triangle", "green"], '
    '[9, "triangle", "orange"], [12, "circle", "blue"], [13, "triangle", "orange"]]}',
    "test": '{"target": ["circle", "purple"], "objects": [[0, "circle", "purple"], [2, "circle", "purple"], '
    '[5, "triangle", "orange"], [6, "circle", "purple"], [9, "triangle", "green"], [10, "circle", "blue"], '
    '[12, "square", "red"], [13, "circle", "purple"]]}',
}
