"""Hub datasets and the paper's recipes, offline: hub-layout stand-ins built from each dataset's schema."""

from __future__ import annotations

import json

import pytest
from hub_standins import write_math, write_mmr1, write_open_r1
from PIL import Image

from corl_vl.cli import main
from corl_vl.cli.train import pair_data_defaults
from corl_vl.config import load_config
from corl_vl.data.dataset_recipes import RECIPES, get_recipe
from corl_vl.data.datasets import load_problems
from corl_vl.data.hub import HubRef, parse_hub_id
from corl_vl.errors import CorlError


def test_known_layouts_load_from_hub_folders(tmp_path):
    mmr1 = load_problems(write_mmr1(tmp_path / "mmr1", n=4))
    assert [p.id for p in mmr1] == ["0", "1", "2", "3"]  # no id column: row index in the split
    assert mmr1[1].question == "How many sides does shape 1 have?"  # the <image> placeholder is gone
    assert mmr1[1].answer == "4"
    image = mmr1[1].images[0]
    assert isinstance(image, Image.Image) and image.size == (32, 24)  # encoded bytes, opened lazily

    open_r1 = load_problems(write_open_r1(tmp_path / "or1", n=3))
    assert [p.answer for p in open_r1] == ["30", "31", "32"]  # "<answer> 30 </answer>" → "30"
    assert open_r1[0].meta["original_answer"].endswith("Answer: 30")
    assert len(open_r1[2].images) == 1

    math = load_problems(write_math(tmp_path / "math", n=5))
    assert [p.answer for p in math] == ["0", "2", "4", "6", "8"]  # last \boxed{} of the solution
    assert math[3].meta["level"] == "Level 4" and not math[3].images


def test_prepare_math_keeps_levels_3_to_5_with_source_ids(tmp_path, capsys):
    source = write_math(tmp_path / "hub-copy", n=10)
    out = tmp_path / "math-l3-5"
    assert main(["data", "prepare", "math-l3-5", "--source", str(source), "--out", str(out)]) == 0
    assert "math-l3-5: 6 problems" in capsys.readouterr().out
    problems = load_problems(out)
    assert [p.id for p in problems] == ["2", "3", "4", "7", "8", "9"]  # ids of the unfiltered split
    assert {p.meta["level"] for p in problems} == {"Level 3", "Level 4", "Level 5"}
    assert [p.answer for p in problems] == ["4", "6", "8", "14", "16", "18"]
    provenance = json.loads((out / "recipe.json").read_text())
    assert provenance["hub_id"] == "DigitalLearningGmbH/MATH-lighteval" and provenance["rows"] == 6
    # a second prepare into the same folder needs --overwrite, and leaves the folder intact without it
    assert main(["data", "prepare", "math-l3-5", "--source", str(source), "--out", str(out)]) == 2
    assert "--overwrite" in capsys.readouterr().err
    assert len(load_problems(out)) == 6


@pytest.mark.parametrize(("recipe", "writer"), [("mmr1-math", write_mmr1), ("open-r1-8k", write_open_r1)])
def test_prepare_vision_recipes_embed_images(tmp_path, recipe, writer):
    out = tmp_path / recipe
    argv = ["data", "prepare", recipe, "--source", str(writer(tmp_path / "src")), "--out", str(out)]
    assert main([*argv, "--limit", "4"]) == 0
    problems = load_problems(out, split="train")
    assert len(problems) == 4 and all(len(p.images) == 1 for p in problems)
    assert problems[0].images[0].convert("RGB").getpixel((0, 0)) == (0, 90, 200)
    assert "<image>" not in problems[0].question and problems[0].answer


def test_recipe_rejects_a_source_of_another_dataset(tmp_path, capsys):
    argv = [
        "data",
        "prepare",
        "math-l3-5",
        "--source",
        str(write_mmr1(tmp_path / "mmr1")),
        "--out",
        str(tmp_path / "out"),
    ]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "not the math layout" in err and "level" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "out").exists()


def test_offline_hub_names_the_dataset_and_how_to_stage_it(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # no network in tests; the message must say what to do
    with pytest.raises(
        CorlError, match=r"mmr1-math \(MMR1/MMR1-Math-RL-Data-v0.*corl-vl data prepare mmr1-math"
    ):
        load_problems("mmr1-math")
    with pytest.raises(CorlError, match=r"someorg/somedata \[test\].*hf download someorg/somedata"):
        load_problems("someorg/somedata@test")
    with pytest.raises(CorlError, match="no such file or folder"):
        load_problems("data/missing.jsonl")
    assert (
        main(["data", "prepare", "math-l3-5", "--out", str(tmp_path / "out")]) == 2
    )  # prepare says: --source
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "hf download DigitalLearningGmbH/MATH-lighteval" in err
    assert "--source DIR" in err and not (tmp_path / "out").exists()
    with pytest.raises(CorlError, match="unknown data recipe 'nope'; recipes: mmr1-math, open-r1-8k"):
        get_recipe("nope")


def test_hub_id_parsing():
    assert parse_hub_id("MMR1/MMR1-Math-RL-Data-v0") == HubRef("MMR1/MMR1-Math-RL-Data-v0")
    assert parse_hub_id("EleutherAI/hendrycks_math:algebra@test") == HubRef(
        "EleutherAI/hendrycks_math", "algebra", "test"
    )
    for path in ("./data/x", "/abs/x", "data/x.jsonl", "a/b/c", "plain-name"):
        assert parse_hub_id(path) is None, path


def test_pair_picks_the_recipe_by_modality():
    vlm, note = pair_data_defaults(["qwen2.5-vl-3b", "internvl3.5-2b"], ["grpo.k=2"])
    assert vlm == ["data.train=mmr1-math", "grpo.k=2"] and "mmr1-math" in note
    text, note = pair_data_defaults(["qwen2.5-vl-3b", "llama-3.2-3b-instruct"], [])
    assert text == ["data.train=math-l3-5"] and "text-only" in note
    mine, note = pair_data_defaults(["qwen2.5-3b", "qwen3-1.7b"], ["data.train=my/data"])
    assert mine == ["data.train=my/data"] and note is None
    tiny, note = pair_data_defaults(["tiny-qwen2.5-vl", "tiny-internvl3.5"], ["data.train=x"])
    assert tiny == ["grpo.max_new_tokens=16", "train.lr=2e-4", "data.train=x"]


def test_pair_configs_train_on_recipes():
    from pathlib import Path

    configs = Path(__file__).resolve().parent.parent / "configs" / "pairs"
    for path in sorted(configs.glob("*.yaml")):
        cfg = load_config(path)
        assert cfg.data.train in RECIPES, path.name
        vision = cfg.data.train == "mmr1-math"
        assert RECIPES[cfg.data.train].modality == ("vision" if vision else "text")


@pytest.mark.slow
def test_train_pair_on_a_hub_layout_folder(tmp_path, capsys):
    """The done-when command: a tiny VLM pair trains on a local copy of MMR1 in the hub's layout."""
    data = write_mmr1(tmp_path / "mmr1", n=8)
    run = tmp_path / "run"
    argv = [
        "train",
        "--pair",
        "tiny-qwen2.5-vl,tiny-internvl3.5",
        "--set",
        f"data.train={data}",
        "--set",
        "data.problems_per_step=2",
        "--set",
        "grpo.k=2",
        "--set",
        "train.plot=false",
        "--max-steps",
        "1",
        "--output-dir",
        str(run),
        "--no-progress",
    ]
    assert main(argv) == 0
    assert "grpo.max_new_tokens=16" in capsys.readouterr().err
    for agent in ("tiny-qwen2.5-vl", "tiny-internvl3.5"):
        rows = (run / "agents" / agent / "metrics.jsonl").read_text().splitlines()
        assert json.loads(rows[0])["step"] == 0
