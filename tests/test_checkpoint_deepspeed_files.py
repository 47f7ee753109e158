"""The DeepSpeed allow-list (corl_vl/train/deepspeed_files.py): DeepSpeed's own data classes pass, a crafted or
foreign file is still refused, and the list is trusted only for the audited DeepSpeed version."""

from __future__ import annotations

import enum
import zipfile
from pathlib import Path

import pytest
import torch

from corl_vl.errors import CorlError
from corl_vl.train import deepspeed_files
from corl_vl.train.deepspeed_files import audit_classes, check_deepspeed_files


class Evil:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


def _deepspeed_like(folder: Path) -> Path:
    """A file with the objects DeepSpeed's ZeRO-2 optimizer file holds besides tensors."""
    from deepspeed.runtime.fp16.loss_scaler import DynamicLossScaler, LossScaler
    from deepspeed.runtime.zero.config import ZeroStageEnum
    from deepspeed.utils.tensor_fragment import fragment_address

    folder.mkdir(parents=True, exist_ok=True)
    file = folder / "zero_pp_rank_0_mp_rank_00_optim_states.pt"
    state = {
        "loss_scaler": LossScaler(1.0),
        "dynamic": DynamicLossScaler(2.0**16, 1000, 1, 2, False),
        "zero_stage": ZeroStageEnum.gradients,
        "param_slice_mappings": [{"w": fragment_address(numel=4, start=0)}],
        "fp32": torch.ones(4),
    }
    torch.save({"optimizer_state_dict": state}, file)
    return file


def _rewrite_pickle(file: Path, old: bytes, new: bytes) -> None:
    """Replace bytes of the pickle inside a torch zip (same length: the archive's offsets stay right)."""
    assert len(old) == len(new)
    with zipfile.ZipFile(file) as archive:
        entries = [(info, archive.read(info)) for info in archive.infolist()]
    with zipfile.ZipFile(file, "w", zipfile.ZIP_STORED) as archive:
        for info, data in entries:
            if info.filename.endswith("data.pkl"):
                assert old in data
                data = data.replace(old, new)
            archive.writestr(info, data)


def test_deepspeeds_own_classes_pass_and_load(tmp_path):
    file = _deepspeed_like(tmp_path / "ds" / "state")
    check_deepspeed_files(tmp_path / "ds", allow_unsafe=False)
    loaded = torch.load(file, weights_only=False)["optimizer_state_dict"]
    assert loaded["param_slice_mappings"][0]["w"].numel == 4 and loaded["zero_stage"] == 2


def test_a_crafted_file_beside_deepspeeds_is_refused_and_runs_nothing(tmp_path):
    _deepspeed_like(tmp_path / "ds" / "state")
    marker = tmp_path / "pwned"
    torch.save({"module": Evil(marker)}, tmp_path / "ds" / "state" / "mp_rank_00_model_states.pt")
    with pytest.raises(
        CorlError, match=r"mp_rank_00_model_states.pt: .*pathlib.*could run code.*--allow-unsafe"
    ):
        check_deepspeed_files(tmp_path / "ds", allow_unsafe=False)
    assert not marker.exists()
    check_deepspeed_files(tmp_path / "ds", allow_unsafe=True)  # the user vouches: nothing is checked


def test_an_allowed_name_split_another_way_is_refused(tmp_path):
    """``deepspeed.runtime.fp16`` + ``loss_scaler.LossScaler`` spells the same dotted name, but is an attribute
    walk (protocol 4) that DeepSpeed never writes."""
    file = _deepspeed_like(tmp_path / "ds" / "state")
    _rewrite_pickle(
        file,
        b"deepspeed.runtime.fp16.loss_scaler\nLossScaler\n",
        b"deepspeed.runtime.fp16\nloss_scaler.LossScaler\n",
    )
    with pytest.raises(CorlError, match="in a form DeepSpeed never writes"):
        check_deepspeed_files(tmp_path / "ds", allow_unsafe=False)


def test_another_deepspeed_version_is_not_trusted(tmp_path, monkeypatch):
    import deepspeed

    _deepspeed_like(tmp_path / "ds" / "state")
    monkeypatch.setattr(deepspeed, "__version__", "0.99.0")
    with pytest.raises(
        CorlError, match=r"DeepSpeed 0.99.0 is installed.*0\.19\.8.*--allow-unsafe-checkpoint"
    ):
        check_deepspeed_files(tmp_path / "ds", allow_unsafe=False)
    # a file that names none of DeepSpeed's classes is plain tensors: any version reads it
    for file in (tmp_path / "ds").rglob("*.pt"):
        torch.save({"w": torch.ones(2)}, file)
    check_deepspeed_files(tmp_path / "ds", allow_unsafe=False)


def test_the_audit_accepts_the_installed_classes_and_catches_code_on_unpickling(monkeypatch, tmp_path):
    class WithState:
        def __setstate__(self, state): ...

    class WithReduce:
        def __reduce__(self):
            return (print, ())

    class WithNew:
        def __new__(cls):
            return super().__new__(cls)

    class Stage(int, enum.Enum):
        one = 1

        @classmethod
        def _missing_(cls, value):
            return cls.one

    assert audit_classes(deepspeed_files._installed_classes()) == []
    bad = audit_classes([WithState, WithReduce, WithNew, Stage])
    assert len(bad) == 4
    _deepspeed_like(tmp_path / "ds" / "state")  # an edited installation: same version, a class that runs code
    monkeypatch.setattr(deepspeed_files, "_installed_classes", lambda: [WithState])
    with pytest.raises(CorlError, match="can run code when unpickled"):
        check_deepspeed_files(tmp_path / "ds", allow_unsafe=False)
