"""DeepSpeed checkpoints resume without ``--allow-unsafe-checkpoint``, and 1 step + resume equals 2 straight steps.

Each case is two ``torchrun`` launches of tests/dist_worker.py (2 processes, gloo): 2 steps saving after each,
then ``--resume`` from a copy of that run cut back to its step-1 checkpoint. The resumed step 2 must equal the
straight one bit for bit: weights, LoRA adapters, DeepSpeed's optimizer partitions, the scheduler, every metric.
Resuming from the same checkpoint the straight run continued from isolates what the checkpoint carries.

Cases (combined to keep launches few): ZeRO-2 with the optimizer offloaded to the CPU, ZeRO-3 (two agents, one
rank each: qwen trains LoRA adapters, llama every weight but its frozen ``lm_head``), and ZeRO-1 with one agent
partitioned over both ranks (real ZeRO partitions: each rank resumes its own), with ``optimizer.offload: cpu``
and ``grpo.dynamic_sampling`` — options that used to be refused under torchrun. ZeRO-1 and ZeRO-2 share
DeepSpeed's stage-1-and-2 optimizer and its checkpoint files (stage 2 also partitions the gradients, which no
checkpoint holds), so the partitioned case runs the stage nothing else here launches.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from test_distributed import _launch

from corl_vl.checkpoint_layout import point_latest
from corl_vl.errors import CorlError

TESTS = Path(__file__).resolve().parent
ZERO = TESTS.parent / "configs" / "deepspeed"


def _ds_config(tmp_path: Path, stage: int, offload: bool) -> Path:
    config = json.loads((ZERO / f"zero{stage}.json").read_text())
    if offload:  # corl-vl sets zero_force_ds_cpu_optimizer: false itself (our AdamW, not DeepSpeedCPUAdam)
        config["zero_optimization"]["offload_optimizer"] = {"device": "cpu"}
    path = tmp_path / f"zero{stage}{'-offload' if offload else ''}.json"
    path.write_text(json.dumps(config))
    return path


def _cut_back_to_step_1(straight: Path, resumed: Path) -> None:
    """A copy of the straight run as a run stopped after step 1 leaves it (its rows past step 1 are dropped by
    the resume itself)."""
    shutil.copytree(straight, resumed, symlinks=True)
    for file in (straight / "run").rglob("*"):  # the run record names the output folder
        if file.suffix == ".yaml":
            copy = resumed / file.relative_to(straight)
            copy.write_text(file.read_text().replace(str(straight), str(resumed)))
    ckpts = resumed / "run" / "checkpoints"
    shutil.rmtree(ckpts / "step-000002")
    point_latest(ckpts, "step-000001")


def _same(a, b, where: str) -> None:
    """Equal nested state: tensors bit for bit, everything else ==."""
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b), where
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for key in a:
            _same(a[key], b[key], f"{where}/{key}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            _same(x, y, f"{where}[{i}]")
    elif hasattr(a, "__dict__"):  # DeepSpeed's loss scaler, fragment addresses
        _same(vars(a), vars(b), where)
    else:
        assert a == b, where


def _assert_step_2_equal(straight: Path, resumed: Path) -> int:
    """Every file of the two step-2 checkpoints and every metrics row equal; returns the files compared."""
    a, b = (p / "run" / "checkpoints" / "step-000002" for p in (straight, resumed))
    files = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file() and p.suffix != ".py")
    assert files == sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file() and p.suffix != ".py")
    for name in files:
        x, y = a / name, b / name
        if x.suffix == ".safetensors":
            _same(load_file(str(x)), load_file(str(y)), str(name))
        elif x.suffix == ".pt":  # DeepSpeed's partitions: our own files, loaded in full to compare them
            _same(torch.load(x, weights_only=False), torch.load(y, weights_only=False), str(name))
        elif x.name != "meta.json":
            assert x.read_bytes() == y.read_bytes(), name
    for agents in (straight / "run" / "agents",):
        for metrics in agents.glob("*/metrics.jsonl"):
            rows = [json.loads(r) for r in metrics.read_text().splitlines()]
            again = resumed / "run" / "agents" / metrics.parent.name / "metrics.jsonl"
            rows_again = [json.loads(r) for r in again.read_text().splitlines()]
            assert [r["step"] for r in rows] == [r["step"] for r in rows_again] == [0, 1]
            for r, s in zip(rows, rows_again):
                assert {k: v for k, v in r.items() if not k.startswith("time/")} == {
                    k: v for k, v in s.items() if not k.startswith("time/")
                }, (metrics.parent.name, r["step"])
    return len(files)


def _straight_then_resumed(tmp_path: Path, name: str, *args: str) -> tuple[Path, Path]:
    straight, resumed = tmp_path / f"{name}-straight", tmp_path / f"{name}-resumed"
    straight.mkdir()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TORCH_EXTENSIONS_DIR": str(tmp_path / "ext")}
    _launch(straight, *args, "--max-steps", "2", "--save-every", "1", env=env)
    _cut_back_to_step_1(straight, resumed)
    _launch(resumed, *args, "--max-steps", "2", "--save-every", "1", "--resume", env=env)  # no unsafe flag
    return straight, resumed


def _trained(out: Path, rank: int) -> dict:
    (record,) = json.loads((out / f"rank-{rank}.json").read_text())
    assert record["deepspeed"] and record["changed_tensors"] > 0, record
    return record


@pytest.mark.distributed
@pytest.mark.parametrize("stage,offload", [(2, True), (3, False)], ids=["zero2-offload", "zero3"])
def test_lora_and_frozen_agents_resume_like_two_straight_steps(tmp_path, stage, offload):
    """qwen trains LoRA adapters, llama every weight but ``lm_head`` (train.freeze); one agent per rank."""
    ds = _ds_config(tmp_path, stage, offload)
    args = ("--deepspeed", str(ds), "--freeze", "lm_head", "--lora", "qwen")
    straight, resumed = _straight_then_resumed(tmp_path, f"zero{stage}", *args)
    assert _trained(straight, 0)["agent"] == "qwen" and _trained(straight, 1)["agent"] == "llama"
    step1 = resumed / "run" / "checkpoints" / "step-000001"
    assert (
        step1 / "state" / "qwen" / "lora" / "adapter_model.safetensors"
    ).exists()  # the adapters are saved
    assert list(step1.rglob("*optim_states.pt"))  # DeepSpeed's own files, resumed without the flag
    assert _assert_step_2_equal(straight, resumed) > 10
    lora = load_file(str(step1 / "state" / "qwen" / "lora" / "adapter_model.safetensors"))
    final = load_file(
        str(
            straight
            / "run"
            / "checkpoints"
            / "step-000002"
            / "state"
            / "qwen"
            / "lora"
            / "adapter_model.safetensors"
        )
    )
    assert any(
        not torch.equal(lora[k], final[k]) for k in lora
    )  # step 2 trained them (so resume restored them)


@pytest.mark.distributed
def test_an_agent_partitioned_over_two_ranks_resumes_each_partition(tmp_path):
    """One agent on both ranks (ZeRO-1, the optimizer in CPU memory through ``optimizer.offload``, dynamic
    sampling): each rank's file holds half the optimizer state; a world-size change on resume is one line."""
    from corl_vl.train.checkpoint import load_checkpoint

    options = ("--set", "optimizer.offload=cpu", "--set", "grpo.dynamic_sampling=2", "--set", "data.limit=16")
    args = ("--deepspeed", str(ZERO / "zero1.json"), "--solo", "--problems-per-step", "4", *options)
    straight, resumed = _straight_then_resumed(tmp_path, "solo", *args)
    record = _trained(straight, 0)
    assert record["group_ranks"] == [0, 1]
    ckpt = straight / "run" / "checkpoints" / "step-000002"
    assert len(list(ckpt.rglob("zero_pp_rank_*_optim_states.pt"))) == 2
    _assert_step_2_equal(straight, resumed)
    rows = [
        json.loads(r)
        for r in (straight / "run" / "agents" / "qwen" / "metrics.jsonl").read_text().splitlines()
    ]
    assert all(r["dynamic/varied_groups"] > 0 and r["trained_rows"] > 0 for r in rows), rows

    cohort = type("Cohort", (), {"dist": type("D", (), {"world_size": 4, "rank": 0})(), "names": ["qwen"]})()
    with pytest.raises(CorlError, match=r"on 2 processes; this launch has \['qwen'\] on 4") as err:
        load_checkpoint(ckpt, cohort)
    assert "\n" not in str(err.value)
