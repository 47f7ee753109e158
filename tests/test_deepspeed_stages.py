"""The DeepSpeed config corl-vl builds: ZeRO-1, 2 and 3 run; ``optimizer.offload: cpu`` is DeepSpeed's
``offload_optimizer`` (the 2-process runs are in tests/test_distributed_resume.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from corl_vl.config import config_from_dict
from corl_vl.errors import CorlError
from corl_vl.plan import arithmetic as ar
from corl_vl.train.deepspeed_setup import deepspeed_config

ZERO = Path(__file__).resolve().parent.parent / "configs" / "deepspeed"


def _config(path, **kw):
    return deepspeed_config(
        str(path), zero_stage=kw.pop("zero_stage", None), grad_clip=1.0, group_size=2, **kw
    )


@pytest.mark.parametrize("stage", [1, 2, 3])
def test_every_stage_file_builds_its_stage(stage):
    ds = _config(ZERO / f"zero{stage}.json")
    assert ds["zero_optimization"]["stage"] == stage and "offload_optimizer" not in ds["zero_optimization"]


def test_stage_zero_is_refused_in_one_line():
    with pytest.raises(CorlError, match=r"zero_optimization\.stage must be 1, 2 or 3, got 0") as err:
        _config(ZERO / "zero2.json", zero_stage=0)
    assert "\n" not in str(err.value)
    with pytest.raises(CorlError, match=r"distributed\.zero_stage"):
        config_from_dict(
            {"agents": [{"name": "a", "model": "tiny-qwen2.5"}], "distributed": {"zero_stage": 4}}
        )


def test_optimizer_offload_cpu_is_deepspeeds_offload_optimizer(tmp_path):
    ds = _config(ZERO / "zero1.json", offload="cpu")
    assert ds["zero_optimization"]["offload_optimizer"]["device"] == "cpu"
    assert ds["zero_force_ds_cpu_optimizer"] is False  # the agent's torch AdamW steps the offloaded partition
    nvme = json.loads((ZERO / "zero2.json").read_text())
    nvme["zero_optimization"]["offload_optimizer"] = {"device": "nvme", "nvme_path": "/x"}
    (tmp_path / "nvme.json").write_text(json.dumps(nvme))
    with pytest.raises(CorlError, match=r"optimizer\.offload: cpu contradicts .*device: nvme"):
        _config(tmp_path / "nvme.json", offload="cpu")


def test_zero1_keeps_whole_gradients_and_partitions_the_optimizer_state():
    one, two = (ar.training_state(1000, 1000, 2, ar.Sharding(ranks=4, zero_stage=s)) for s in (1, 2))
    assert one["gradients"] == 1000 * 2 and two["gradients"] == 1000 * 2 // 4
    assert one["optimizer_state"] == two["optimizer_state"] == 1000 * 8 // 4


@pytest.mark.distributed
def test_a_launch_refuses_a_bad_deepspeed_file_before_models_load(tmp_path):
    """The DeepSpeed file is checked against the launch's placement before any model loads or the run folder is
    written (it used to be refused by the backend, after both)."""
    import os
    import subprocess

    from test_cohort import TINY_COHORT
    from torchrun_launch import torchrun

    bad = json.loads((ZERO / "zero2.json").read_text())
    bad["optimizer"] = {"type": "AdamW", "params": {"lr": 1e-3}}
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    out = tmp_path / "run"
    sets = [f"distributed.deepspeed={tmp_path / 'bad.json'}", f"train.output_dir={out}", "train.plot=false"]
    cmd = torchrun(
        "-m", "corl_vl", "train", "--config", str(TINY_COHORT), *[a for s in sets for a in ("--set", s)]
    )
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode != 0
    assert "drop 'optimizer'/'scheduler'" in done.stderr, done.stderr[-3000:]
    assert "rollout engine" not in done.stderr  # no agent was built
    assert not (out / "config.yaml").exists()
