"""``corl-vl data rephrase``: the written view pairs with its original, and the guard replaces broken rewrites.

A random tiny model writes no sensible rewrite, so on it the guard must fire on every row and be counted; the
guard itself is checked on hand-written rewrites.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from PIL import Image

from corl_vl.cli import main
from corl_vl.data import Problem, generate_problems, load_paired_view, load_problems, to_text_problem
from corl_vl.data.paired import verify_paired_views
from corl_vl.data.rephrase import check_rewrite, numbers_in, write_view
from corl_vl.errors import CorlError


def _write_original(path: Path, problems: list[Problem]) -> None:
    with path.open("w") as fh:
        for p in problems:
            row = {"id": p.id, "question": p.question, "answer": p.answer, "choices": p.choices}
            fh.write(json.dumps(row) + "\n")


def test_guard_on_hand_written_rewrites() -> None:
    original = "A shop sells 1,200 apples at $2.50 each. How much money is that?"
    assert numbers_in(original) == {"1200", "2.5"}
    good = "A market stall has 1200 apples, priced at 2.5 dollars apiece. What is the total revenue?"
    assert check_rewrite(original, good) == "ok"
    assert check_rewrite(original, "   \n") == "empty"
    assert check_rewrite(original, "A stall has 1200 apples at some price. Total?") == "missing_number"
    assert check_rewrite(original, good, clipped=True) == "too_long"
    assert check_rewrite(original, good + " 1200 2.5" * 200) == "too_long"
    # "12" inside "1200" is not the number 12
    assert check_rewrite("Add 12 and 5.", "Sum 1200 and 5.") == "missing_number"


def test_cli_rephrase_tiny_model_pairs_and_counts_guard(tmp_path: Path, capsys) -> None:
    originals = [to_text_problem(p) for p in generate_problems(3, seed=0)]
    src = tmp_path / "orig.jsonl"
    _write_original(src, originals)
    out = tmp_path / "rephrased.jsonl"
    argv = ["data", "rephrase", "--model", "tiny-qwen2.5", "--data", str(src), "--out", str(out)]
    assert main([*argv, "--max-new-tokens", "8"]) == 0
    printed = capsys.readouterr().out
    original = load_problems(src)
    view = load_paired_view(original, out)
    verify_paired_views(original, load_problems(out), source=str(out))
    assert [p.id for p in view] == [p.id for p in original]
    assert [(p.answer, p.choices) for p in view] == [(p.answer, p.choices) for p in original]
    # 8 tokens of a random model: every rewrite is cut at the limit → replaced by the original and counted
    assert [p.meta["rephrase"] for p in view] == ["too_long"] * 3
    assert [p.question for p in view] == [p.question for p in original]
    assert "3 kept the original question (too_long: 3)" in printed
    assert main(argv) == 2  # the output exists: refused without --overwrite
    assert "already exists" in capsys.readouterr().err


def test_cli_rephrase_bad_data_is_one_line(tmp_path: Path, capsys) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "a", "question": "1+1?"}\n{"id": "a", "question": "2+2?"}\n')
    argv = [
        "data",
        "rephrase",
        "--model",
        "tiny-qwen2.5",
        "--data",
        str(bad),
        "--out",
        str(tmp_path / "o.jsonl"),
    ]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "duplicate id 'a'" in err and str(bad) in err and len(err.splitlines()) == 1


@pytest.mark.parametrize("name", ["view.jsonl", "view_folder"])
def test_write_view_keeps_images_answers_and_rewrites(tmp_path: Path, name: str) -> None:
    png = tmp_path / "pic.png"
    Image.new("RGB", (8, 8), (255, 0, 0)).save(png)
    embedded = Image.new("RGB", (6, 6), (0, 0, 255))
    original = [
        Problem("p0", "What is 2 + 3?", images=[str(png)], answer="5"),
        Problem("p1", "Which is bigger, 4 or 7?", images=[embedded], choices=["4", "7"], answer="B"),
    ]
    rewritten = [
        Problem(
            "p0", "Tom has 2 pens and buys 3 more; how many now?", [str(png)], None, "5", {"rephrase": "ok"}
        ),
        Problem("p1", "Compare 4 and 7: which is larger?", [embedded], ["4", "7"], "B", {"rephrase": "ok"}),
    ]
    out = write_view(rewritten, tmp_path / name)
    view = load_paired_view(original, out)
    assert [p.question for p in view] == [p.question for p in rewritten]
    assert [(p.answer, p.choices) for p in view] == [("5", None), ("B", ["4", "7"])]
    assert len(view[0].images) == 1 and len(view[1].images) == 1
    if name.endswith(".jsonl"):
        assert view[0].images[0] == str(png.resolve())  # paths are kept; embedded ones come from the original
        assert view[1].images[0] is embedded
    else:  # the folder embeds every picture: self-contained
        assert load_problems(out)[1].images[0].convert("RGB").getpixel((0, 0)) == (0, 0, 255)
    with pytest.raises(CorlError, match="already exists"):
        write_view(rewritten, out)
