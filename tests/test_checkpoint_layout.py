"""Checkpoint layout: each agent folder is a plain model folder, training state lives beside it under
``state/<agent>/``, and checkpoints written in the older layout (state inside the agent folder) still resume."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from test_checkpoint import _builder, _config

from corl_vl.config import apply_overrides
from corl_vl.recipe import train
from corl_vl.train.checkpoint import latest_checkpoint

AGENTS = ("qwen", "internvl")


def _two_steps(run: Path):
    return apply_overrides(_config(run), ["train.max_steps=2", "train.save_every=1"])


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory) -> Path:
    """A tiny two-agent run with checkpoints at steps 1 and 2."""
    run = tmp_path_factory.mktemp("layout") / "run"
    train(_two_steps(run), progress=False, prepare=_builder())
    return run


def _rewound(run: Path, to: Path) -> Path:
    """A copy of ``run`` as if it had been killed after its step-1 checkpoint."""
    copy = Path(shutil.copytree(run, to, symlinks=True))
    shutil.rmtree(copy / "checkpoints" / "step-000002")
    (copy / "checkpoints" / "latest").unlink()
    (copy / "checkpoints" / "latest").symlink_to("step-000001", target_is_directory=True)
    return copy


def _to_old_layout(ckpt: Path) -> None:
    """Rewrite a checkpoint as format 2 wrote it: trainer_state.* inside the agent's model folder."""
    for agent in AGENTS:
        for file in (ckpt / "state" / agent).iterdir():
            file.rename(ckpt / agent / file.name)
    shutil.rmtree(ckpt / "state")
    meta = json.loads((ckpt / "meta.json").read_text())
    (ckpt / "meta.json").write_text(json.dumps({**meta, "format": 2}))


def _resume(run: Path) -> dict[str, dict[str, torch.Tensor]]:
    train(_two_steps(run), resume=True, progress=False, prepare=_builder())
    from safetensors.torch import load_file

    ckpt = latest_checkpoint(run)
    assert ckpt.name == "step-000002"
    return {a: load_file(str(ckpt / a / "model.safetensors")) for a in AGENTS}


def test_agent_folder_holds_only_model_files(trained_run):
    ckpt = latest_checkpoint(trained_run)
    assert json.loads((ckpt / "meta.json").read_text())["format"] == 3
    for agent in AGENTS:
        names = {p.name for p in (ckpt / agent).iterdir()}
        assert not {n for n in names if n.startswith("trainer_state")}, names
        assert [p.name for p in (ckpt / agent).glob("*.safetensors")] == ["model.safetensors"]
        assert {"config.json", "corl_prompt.json"} <= names
        state = ckpt / "state" / agent
        assert (state / "trainer_state.json").is_file() and (state / "trainer_state.safetensors").is_file()


def test_old_layout_resumes_like_the_new_one(trained_run, tmp_path):
    new, old = _rewound(trained_run, tmp_path / "new"), _rewound(trained_run, tmp_path / "old")
    _to_old_layout(latest_checkpoint(old))
    assert not (latest_checkpoint(old) / "state").exists()
    from_new, from_old = _resume(new), _resume(old)
    from safetensors.torch import load_file

    for agent in AGENTS:
        whole = load_file(str(latest_checkpoint(trained_run) / agent / "model.safetensors"))
        for resumed in (from_new[agent], from_old[agent]):  # both equal the run that was never killed
            assert resumed.keys() == whole.keys() and all(torch.equal(resumed[k], whole[k]) for k in whole)


def test_vllm_refuses_an_old_layout_agent_folder_in_one_line(trained_run, tmp_path):
    from corl_vl.errors import CorlError
    from corl_vl.eval.generate import Generator

    old = _rewound(trained_run, tmp_path / "old")
    _to_old_layout(latest_checkpoint(old))
    with pytest.raises(CorlError, match=r"qwen: holds training state .* --engine hf"):
        Generator(str(latest_checkpoint(old) / "qwen"), engine="vllm")
