"""Faults a user meets, one test per row of the fault probe in docs/reliability.md (each failed before its fix).

Disks are a real tmpfs where this machine can mount one, else patched writers (tests/faulty_disk.py). The
signal tests are in tests/test_faults_signals.py.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
from contextlib import ExitStack
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import yaml
from faulty_disk import fill, patch_writes, tmpfs, tmpfs_works
from test_checkpoint import _builder, _config
from test_cohort import TINY, TINY_COHORT

from corl_vl.cli import main
from corl_vl.config import apply_overrides, load_config
from corl_vl.errors import CorlError
from corl_vl.io import read_jsonl
from corl_vl.recipe import train
from corl_vl.train.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from corl_vl.train.cohort import Cohort

ROOT = Path(__file__).resolve().parent.parent


class Evil:
    """Unpickling this runs code: it writes a marker file (what a crafted checkpoint would do)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (exec, (f"import pathlib; pathlib.Path({str(self.marker)!r}).write_text('pwned')",))


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory) -> Path:
    """A tiny cohort trained one step with a checkpoint (copied by each test that changes it)."""
    run = tmp_path_factory.mktemp("faults") / "run"
    cfg = _config(run)
    cfg.train.max_steps = 1
    train(cfg, progress=False, prepare=_builder())
    return run


def _copy(run: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(run, tmp_path / "run", symlinks=True))


def _resume_config(run: Path, *overrides: str):
    return apply_overrides(_config(run), ["train.max_steps=1", *overrides])


# ------------------------------------------------------------------------------------------ checkpoints
@pytest.mark.parametrize("which", ["trainer_state", "cohort_state"])
def test_crafted_pickle_in_checkpoint_runs_nothing(trained_run, tmp_path, which):
    run = _copy(trained_run, tmp_path)
    ckpt = latest_checkpoint(run)
    folder = ckpt / "state" / "qwen" if which == "trainer_state" else ckpt
    for suffix in (".json", ".safetensors"):
        (folder / f"{which}{suffix}").unlink()
    marker = tmp_path / "pwned"
    torch.save({"optimizer": Evil(marker)}, folder / f"{which}.pt")
    with pytest.raises(CorlError, match=r"could run code.*--allow-unsafe-checkpoint"):
        train(_resume_config(run), resume=True, progress=False, prepare=_builder())
    assert not marker.exists()


def test_crafted_pickle_in_distributed_checkpoint_runs_nothing(tmp_path):
    """The multi-process loader: a crafted DeepSpeed partition or RNG file is refused before anything reads it."""
    from corl_vl.train import checkpoint

    marker = tmp_path / "pwned"
    loaded: list[Path] = []  # what DeepSpeed would have been asked to load
    agent = SimpleNamespace(name="a", backend=SimpleNamespace(load=loaded.append))
    cohort = SimpleNamespace(dist=SimpleNamespace(world_size=2, rank=0), names=["a"], agents=[agent])
    ckpt = tmp_path / "step-000001"
    (ckpt / "a" / "deepspeed" / "state").mkdir(parents=True)
    (ckpt / "meta.json").write_text(json.dumps({"step": 1, "agents": ["a"], "world_size": 2}))
    torch.save({"module": Evil(marker)}, ckpt / "a" / "deepspeed" / "state" / "mp_rank_00_model_states.pt")
    with pytest.raises(CorlError, match="could run code"):
        load_checkpoint(ckpt, cohort)
    assert not marker.exists() and not loaded
    # the per-rank RNG state of an old checkpoint goes through the same restricted loader
    (ckpt / "rng").mkdir()
    torch.save({"torch": Evil(marker)}, ckpt / "rng" / "rank-0.pt")
    with pytest.raises(CorlError, match="could run code"):
        checkpoint._read_state(ckpt / "rng", "rank-0", allow_unsafe=False)
    assert not marker.exists()


def test_old_pickled_checkpoint_needs_explicit_opt_in(trained_run, tmp_path):
    """A checkpoint of an older version (pickled *.pt state with numpy RNG state): a clear message, and
    ``--allow-unsafe-checkpoint`` loads the user's own file."""
    from corl_vl.train.safe_state import load_state

    run = _copy(trained_run, tmp_path)
    ckpt = latest_checkpoint(run)
    for folder, name in [
        (ckpt / "state" / "qwen", "trainer_state"),
        (ckpt / "state" / "internvl", "trainer_state"),
        (ckpt, "cohort_state"),
    ]:
        torch.save(load_state(folder, name), folder / f"{name}.pt")
        for suffix in (".json", ".safetensors"):
            (folder / f"{name}{suffix}").unlink()
    with pytest.raises(CorlError, match="--allow-unsafe-checkpoint"):
        train(_resume_config(run), resume=True, progress=False, prepare=_builder())
    train(_resume_config(run), resume=True, progress=False, prepare=_builder(), allow_unsafe_checkpoint=True)
    assert "--allow-unsafe-checkpoint" in _help("train")


def test_checkpoint_holds_no_pickle_and_files_share_one_mode(trained_run):
    ckpt = latest_checkpoint(trained_run)
    files = [p for p in ckpt.rglob("*") if p.is_file()]
    assert not [p for p in files if p.suffix in (".pt", ".pkl", ".bin")]
    umask = os.umask(0)
    os.umask(umask)
    assert {p.stat().st_mode & 0o777 for p in files} == {0o666 & ~umask}


def _help(command: str) -> str:
    return subprocess.run(
        [sys.executable, "-m", "corl_vl", command, "--help"], capture_output=True, text=True
    ).stdout


@pytest.mark.parametrize("how", ["HF_HUB_OFFLINE", "unreachable"])
def test_hub_model_offline_fails_fast_with_the_fix(tmp_path, how):
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    if how == "HF_HUB_OFFLINE":
        env["HF_HUB_OFFLINE"] = "1"
    else:
        env["HF_ENDPOINT"] = "http://127.0.0.1:9"  # nothing listens there: the hub cannot be reached
    out = tmp_path / "run"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "corl_vl",
            "train",
            "--pair",
            "qwen2.5-vl-3b,internvl3.5-2b",
            "--set",
            "data.train=synthetic",
            "--output-dir",
            str(out),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    line = lines[0]
    assert "Qwen/Qwen2.5-VL-3B-Instruct" in line and "huggingface-cli download" in line and "HF_HOME" in line
    assert ("HF_HUB_OFFLINE is set" if how == "HF_HUB_OFFLINE" else "cannot be reached") in line
    assert not out.exists()


# ----------------------------------------------------------------------------------------------- disks
def test_disk_full_at_start_leaves_no_empty_config(tmp_path, monkeypatch):
    out = tmp_path / "run"
    out.mkdir()
    patch_writes(monkeypatch, out, errno.ENOSPC, mkdir=False)
    cfg = load_config(TINY_COHORT, [*TINY, f"train.output_dir={out}"])
    monkeypatch.setattr("corl_vl.recipe.build_cohort", _never_built)
    with pytest.raises(CorlError, match=r"(config\.yaml|run\.lock): cannot write, no space left"):
        train(cfg, progress=False)
    assert not (out / "config.yaml").exists() and not any(out.iterdir())


def _never_built(cfg, **kwargs):
    raise AssertionError("the models were loaded although the run could not start")


def test_disk_full_during_save_keeps_previous_checkpoint(trained_run, tmp_path, monkeypatch):
    run = _copy(trained_run, tmp_path)
    cohort = Cohort.from_config(_resume_config(run))
    _builder()(cohort)
    load_checkpoint(latest_checkpoint(run), cohort)
    cohort.step_index = 2
    before = sorted(p.name for p in (run / "checkpoints").iterdir())
    if tmpfs_works():  # a real full disk: the checkpoint folder on a tmpfs just big enough for the old one
        size = sum(p.stat().st_size for p in run.rglob("*") if p.is_file())
        with tmpfs(tmp_path / "disk", f"{size // 1024 + 2048}k") as disk:
            shutil.copytree(run, disk / "run", symlinks=True)
            fill(disk)
            with pytest.raises(
                CorlError,
                match=r"saving checkpoint .*step-000002.*no space left.*previous checkpoint is intact",
            ):
                save_checkpoint(disk / "run", cohort)
            assert sorted(p.name for p in (disk / "run" / "checkpoints").iterdir()) == before
            assert latest_checkpoint(disk / "run").name == "step-000001"
        return
    patch_writes(monkeypatch, run, errno.ENOSPC, mkdir=False)
    with pytest.raises(
        CorlError, match=r"saving checkpoint .*step-000002.*no space left.*previous checkpoint is intact"
    ):
        save_checkpoint(run, cohort)
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == before
    assert latest_checkpoint(run).name == "step-000001"


def _grade_input(tmp_path: Path) -> Path:
    src = tmp_path / "responses.jsonl"
    src.write_text(json.dumps({"id": "a", "response": "\\boxed{2}", "answer": "2"}) + "\n")
    return src


@pytest.mark.parametrize("code, words", [(errno.EROFS, "read-only"), (errno.EACCES, "permission denied")])
def test_unwritable_output_is_one_line(tmp_path, monkeypatch, capsys, code, words):
    src = _grade_input(tmp_path)
    locked = tmp_path / "locked"
    locked.mkdir()
    train_argv = [
        "train",
        "--config",
        str(TINY_COHORT),
        "--output-dir",
        str(locked / "run"),
        "--no-progress",
        *[a for kv in TINY for a in ("--set", kv)],
    ]
    with ExitStack() as stack:
        if code == errno.EROFS and tmpfs_works():  # a real read-only file system
            stack.enter_context(tmpfs(locked, "1m"))
            subprocess.run(["mount", "-o", "remount,ro", str(locked)], check=True)
        else:
            patch_writes(monkeypatch, locked, code)
        assert main(["grade", "--input", str(src), "--output", str(locked / "g.jsonl")]) == 2
        assert main(train_argv) == 2
        assert not any(locked.iterdir())
    err = capsys.readouterr().err
    assert "Traceback" not in err and words in err
    assert all(line.startswith("corl-vl ") and "error:" in line for line in err.strip().splitlines()), err


def test_output_path_that_is_a_folder(tmp_path, capsys):
    src = _grade_input(tmp_path)
    assert main(["grade", "--input", str(src), "--output", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "is a folder, not a file" in err


# --------------------------------------------------------------------------------------------- resume
def test_resume_refuses_changed_training_settings_and_records_accepted_ones(
    trained_run, tmp_path, monkeypatch
):
    run = _copy(trained_run, tmp_path)
    record = (run / "config.yaml").read_text()
    changed = _resume_config(run, "grpo.k=2", "train.lr=0.5")
    monkeypatch.setattr("corl_vl.recipe.build_cohort", _never_built)
    with pytest.raises(CorlError) as err:
        train(changed, resume=True, progress=False)
    message = str(err.value)
    assert "grpo.k: 4 → 2" in message and "train.lr: 0.001 → 0.5" in message
    assert "--allow-config-change grpo.k train.lr" in message
    assert (run / "config.yaml").read_text() == record  # the run's record still describes its checkpoints

    with pytest.raises(CorlError, match=r"train\.lr"):  # opting in to one key is not enough
        train(changed, resume=True, progress=False, allow_config_change=["grpo.k"])
    monkeypatch.undo()
    train(
        changed, resume=True, progress=False, prepare=_builder(), allow_config_change=["grpo.k", "train.lr"]
    )
    saved = yaml.safe_load((run / "config.yaml").read_text())
    assert saved["grpo"]["k"] == 2 and saved["train"]["lr"] == 0.5
    (entry,) = saved["history"]
    assert entry["resumed_at_step"] == 1
    assert entry["changed"]["grpo.k"] == {"from": 4, "to": 2}
    assert entry["changed"]["train.lr"] == {"from": 0.001, "to": 0.5}
    assert "--allow-config-change" in _help("train")


# ------------------------------------------------------------------------------------ configs that train
def test_k_of_one_is_refused():
    with pytest.raises(CorlError, match=r"grpo\.k: must be ≥ 2"):
        load_config(TINY_COHORT, ["grpo.k=1"])


@pytest.mark.parametrize("problem", ["problems_per_step", "gt_without_golds"])
def test_data_errors_are_found_before_models_load(tmp_path, monkeypatch, problem):
    from corl_vl.train.cohort import Cohort

    monkeypatch.setattr(Cohort, "from_config", classmethod(lambda cls, *a, **k: _never_built(None, None)))
    out = tmp_path / "run"
    if problem == "problems_per_step":
        overrides, match = ["data.limit=4", "data.problems_per_step=5"], "problems_per_step=5 but .* only 4"
    else:
        data = tmp_path / "unlabelled.jsonl"
        data.write_text(
            "".join(json.dumps({"id": f"q{i}", "question": f"{i} + 1 = ?"}) + "\n" for i in range(4))
        )
        overrides, match = [f"data.train={data}", "reward.name=gt"], "needs a gold answer .* 4 of 4"
    cfg = load_config(TINY_COHORT, [*TINY, *overrides, f"train.output_dir={out}"])
    with pytest.raises(CorlError, match=match):
        train(cfg, progress=False)
    assert not out.exists()  # no config.yaml, tensorboard/ or empty metrics left behind


@pytest.mark.timeout(1800)  # the first run builds the demo's two warm-started bases (cached for later runs)
def test_demo_config_trains(tmp_path, capsys):
    """configs/demo.yaml (the README's first training run) starts from warm-started bases, so within two
    steps the agents get peer labels, train on them, and their weights move."""
    from safetensors.torch import load_file

    out = tmp_path / "demo"
    argv = [
        "train",
        "--config",
        str(ROOT / "configs" / "demo.yaml"),
        "--output-dir",
        str(out),
        "--no-progress",
    ]
    assert main([*argv, "--max-steps", "2", "--set", "train.plot=false"]) == 0
    cfg = yaml.safe_load((out / "config.yaml").read_text())
    for agent in cfg["agents"]:
        rows = [r for _, r in read_jsonl(out / "agents" / agent["name"] / "metrics.jsonl")]
        assert len(rows) == 2 and sum(r["trained_rows"] for r in rows) > 0, rows
        base = load_file(str(Path(agent["model"]) / "model.safetensors"))
        after = load_file(str(latest_checkpoint(out) / agent["name"] / "model.safetensors"))
        assert any(not torch.equal(base[k], after[k]) for k in base), agent["name"]
    demo = yaml.safe_load((ROOT / "configs" / "science" / "demo_warm.yaml").read_text())
    assert (
        yaml.safe_load((ROOT / "configs" / "demo.yaml").read_text())["experiment"]["warm_start"]
        == demo["experiment"]["warm_start"]
    )


# ---------------------------------------------------------------------------------------- small ones
def test_duplicate_response_ids_need_allow_multiple(fixtures_dir, tmp_path, capsys):
    responses = tmp_path / "r.jsonl"
    responses.write_text('{"id": "1", "response": "\\\\boxed{1}"}\n{"id": "1", "response": "\\\\boxed{2}"}\n')
    data = str(fixtures_dir / "eval" / "mathvista" / "testmini.json")
    argv = ["eval", "--benchmark", "mathvista", "--data", data, "--responses", str(responses)]
    assert main([*argv, "--output-dir", str(tmp_path / "a")]) == 2
    err = capsys.readouterr().err
    assert f"{responses}:2: id '1' already appeared on line 1" in err and "--allow-multiple" in err
    assert main([*argv, "--output-dir", str(tmp_path / "b"), "--allow-multiple"]) == 0


def test_invalid_json_names_the_right_column(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"id": 1}\n{"id": 2\n')
    with pytest.raises(CorlError, match=r"bad.jsonl:2: invalid JSON \(Expecting ',' delimiter at column 9\)"):
        read_jsonl(path)


def test_resume_accepts_settings_a_newer_version_added(trained_run, tmp_path):
    """A run recorded before a setting existed resumes when that setting keeps its default."""
    run = _copy(trained_run, tmp_path)
    record = yaml.safe_load((run / "config.yaml").read_text())
    del record["grpo"]["epsilon_high"], record["reward"]["ties"]
    (run / "config.yaml").write_text(yaml.safe_dump(record, sort_keys=False))
    train(_resume_config(run), resume=True, progress=False, prepare=_builder())
    (entry,) = yaml.safe_load((run / "config.yaml").read_text())["history"]
    assert set(entry["changed"]) == {
        "train.output_dir"
    }  # the copied run's folder; the missing keys are defaults
