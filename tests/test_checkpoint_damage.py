"""Damaged checkpoints: one CorlError line naming the file and what is wrong, never a traceback from deep
inside torch or safetensors; meta.json's step must be the step the training state holds."""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import pytest
from test_checkpoint import _builder, _config

from corl_vl.config import apply_overrides
from corl_vl.errors import CorlError
from corl_vl.eval.runs import expand_models
from corl_vl.recipe import train
from corl_vl.train.checkpoint import latest_checkpoint, load_checkpoint
from corl_vl.train.cohort import Cohort


def _one_step(run: Path):
    return apply_overrides(_config(run), ["train.max_steps=1", "train.save_every=1"])


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("damage") / "run"
    train(_one_step(run), progress=False, prepare=_builder())
    return run


@pytest.fixture(scope="module")
def cohort(trained_run):
    """A cohort built from the run's config (load_checkpoint is refused before it changes anything here)."""
    return _prepared(_one_step(trained_run))


def _prepared(cfg):
    cohort = Cohort.from_config(cfg)
    _builder()(cohort)
    return cohort


def _copy(run: Path, tmp_path: Path) -> Path:
    return latest_checkpoint(Path(shutil.copytree(run, tmp_path / "run", symlinks=True)))


def _never_built(cfg, **kwargs):
    raise AssertionError("the models were loaded although the checkpoint is damaged")


def _edit_json(file: Path, change) -> None:
    data = json.loads(file.read_text())
    change(data)
    file.write_text(json.dumps(data))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{not json", r"meta\.json: not readable JSON"),
        ('{"step": 1, "format": 3}', r"meta\.json: no 'agents' list"),
        ('["qwen"]', r"meta\.json: expected a JSON object"),
        (
            '{"step": -5, "agents": ["qwen", "internvl"], "format": 3}',
            r"meta\.json: 'step' must be a non-neg",
        ),
        (
            '{"step": 1, "agents": ["../../escaped"], "format": 3}',
            r"meta\.json: agent name '\.\./\.\./escaped'",
        ),
    ],
)
def test_bad_meta_json_is_refused_before_models_load(trained_run, tmp_path, text, message, monkeypatch):
    ckpt = _copy(trained_run, tmp_path)
    monkeypatch.setattr("corl_vl.recipe.build_cohort", _never_built)
    (ckpt / "meta.json").write_text(text)
    with pytest.raises(CorlError, match=message):
        train(_one_step(ckpt.parent.parent), resume=True, progress=False)
    with pytest.raises(CorlError, match=message):  # eval --model RUN reads the same file
        expand_models([str(ckpt.parent.parent)])


def test_meta_step_must_equal_the_state_step(trained_run, cohort, tmp_path):
    ckpt = _copy(trained_run, tmp_path)
    _edit_json(ckpt / "meta.json", lambda meta: meta.update(step=999))
    with pytest.raises(CorlError, match=r"meta\.json: step 999 but .*cohort_state\.json holds step 1"):
        load_checkpoint(ckpt, cohort)


def _huge_header(file: Path) -> None:
    file.write_bytes(struct.pack("<Q", 2**62) + file.read_bytes()[8:])


def _truncated(file: Path) -> None:
    file.write_bytes(file.read_bytes()[: file.stat().st_size // 2])


@pytest.mark.parametrize("damage", [_huge_header, _truncated], ids=["header-2^62", "truncated"])
@pytest.mark.parametrize(
    "file", ["qwen/model.safetensors", "state/qwen/trainer_state.safetensors", "cohort_state.safetensors"]
)
def test_damaged_safetensors_name_the_file(trained_run, cohort, tmp_path, damage, file):
    ckpt = _copy(trained_run, tmp_path)
    damage(ckpt / file)
    with pytest.raises(CorlError, match=rf"{file}: .*(cannot be read|unreadable).*damaged") as err:
        load_checkpoint(ckpt, cohort)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("file", "change"),
    [
        ("state/qwen/trainer_state.json", lambda s: s.update(optimiser=s.pop("optimizer"))),
        ("state/internvl/trainer_state.json", lambda s: s["optimizer"].pop("param_groups")),
        ("cohort_state.json", lambda s: s.pop("rng")),
        ("cohort_state.json", lambda s: s["cohort"].pop("sampler")),
        ("cohort_state.json", lambda s: s["rng"].pop("torch")),
    ],
    ids=["optimizer-renamed", "no-param-groups", "no-rng", "no-sampler", "no-torch-rng"],
)
def test_state_with_wrong_keys_names_the_file(trained_run, cohort, tmp_path, file, change):
    ckpt = _copy(trained_run, tmp_path)
    _edit_json(ckpt / file, change)
    with pytest.raises(CorlError, match=rf"{file}: .*(state this run expects|damaged)"):
        load_checkpoint(ckpt, cohort)
