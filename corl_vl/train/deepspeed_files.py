"""Which DeepSpeed checkpoint files a resume lets DeepSpeed unpickle without ``--allow-unsafe-checkpoint``.

Why an allow-list: DeepSpeed loads its ZeRO files with ``torch.load(weights_only=False)``, and besides tensors and
containers they name four of DeepSpeed's own classes (its loss scalers, the ZeRO stage enum, the address of a
parameter's slice in a flat partition). Unpickling any of them runs no code of the file's choosing, so a file that
names nothing else is data; a file that names anything else (a crafted or foreign file) is refused before
DeepSpeed opens it. The list is exact for the DeepSpeed version corl-vl pins and was read against: another
installed version may have changed what those classes do when unpickled, so it is not trusted blindly.

Why each class is inert when unpickled (docs/reliability.md): the loss scalers and ``fragment_address`` are plain
objects — pickle creates them with ``object.__new__`` and fills ``__dict__`` (none defines ``__setstate__``,
``__reduce__`` or ``__new__``), or calls ``__init__``, which only assigns fields; ``ZeroStageEnum`` is an ``int``
enum, rebuilt by a lookup of its value. :func:`audit_classes` checks those properties on the installed classes.
"""

from __future__ import annotations

import enum
import importlib
import io
import pickletools
import zipfile
from pathlib import Path

from corl_vl.errors import CorlError
from corl_vl.train.safe_state import UNSAFE_FLAG, check_pickle_globals

# the version pinned in pyproject.toml, whose checkpoint code this list was read from
AUDITED_DEEPSPEED = "0.19.8"

# (module, class) exactly as DeepSpeed's own ZeRO-1/2/3 checkpoints name them (with and without CPU offload,
# fp16/bf16/fp32, LoRA, frozen parameters): the optimizer files hold the loss scaler, the stage and, in ZeRO-1/2,
# ``param_slice_mappings`` (one fragment_address per parameter); the model-state files hold only torch types.
DEEPSPEED_DATA_CLASSES = frozenset(
    {
        ("deepspeed.runtime.fp16.loss_scaler", "LossScaler"),
        ("deepspeed.runtime.fp16.loss_scaler", "DynamicLossScaler"),
        ("deepspeed.runtime.zero.config", "ZeroStageEnum"),
        ("deepspeed.utils.tensor_fragment", "fragment_address"),
    }
)
_DOTTED = frozenset(f"{module}.{name}" for module, name in DEEPSPEED_DATA_CLASSES)


def audit_classes(classes: list[type]) -> list[str]:
    """The classes whose unpickling could run more than plain field assignment or an enum lookup."""
    bad = []
    for cls in classes:
        if issubclass(cls, enum.Enum):
            inert = cls._missing_.__func__ is enum.Enum._missing_.__func__ and "__reduce_ex__" not in vars(
                cls
            )
        else:
            inert = (
                getattr(cls, "__setstate__", None) is None
                and cls.__new__ is object.__new__
                and cls.__reduce_ex__ is object.__reduce_ex__
                and cls.__reduce__ is object.__reduce__
            )
        if not inert:
            bad.append(f"{cls.__module__}.{cls.__qualname__}")
    return bad


def _installed_classes() -> list[type]:
    return [getattr(importlib.import_module(m), n) for m, n in sorted(DEEPSPEED_DATA_CLASSES)]


def _named_pairs(file: Path) -> set[tuple[str, str]]:
    """Every (module, name) the pickle's GLOBAL opcodes name, split as written (``a.b`` + ``c`` is not ``a`` +
    ``b.c``: the latter is an attribute walk that could reach another object)."""
    pairs: set[tuple[str, str]] = set()
    with zipfile.ZipFile(file) as archive:
        for data in (n for n in archive.namelist() if n.endswith("data.pkl")):  # every one, not a decoy first
            stream = io.BytesIO(archive.read(data))
            pairs |= {
                tuple(arg.split(" ", 1)) for op, arg, _ in pickletools.genops(stream) if op.name == "GLOBAL"
            }
    return pairs


def check_deepspeed_files(folder: Path, allow_unsafe: bool) -> None:
    """Refuse (one line naming the file) any ``*.pt`` under ``folder`` that DeepSpeed must not unpickle: one
    naming a callable beyond torch's tensor rebuilds and :data:`DEEPSPEED_DATA_CLASSES`, or naming those classes
    while another DeepSpeed than the audited one is installed. Reads opcodes only; nothing is loaded."""
    if allow_unsafe:
        return
    for file in sorted(folder.rglob("*.pt")):
        check_pickle_globals(file, _DOTTED)  # anything else: refused, naming it
        try:
            pairs = _named_pairs(file)
        except Exception as err:  # torch's reader accepted it, but another data.pkl in it is no pickle
            raise CorlError(f"{file}: not a readable torch checkpoint file ({type(err).__name__})") from None
        named = {pair for pair in pairs if ".".join(pair) in _DOTTED}
        if not named:
            continue
        odd = sorted(".".join(p) for p in named - DEEPSPEED_DATA_CLASSES)
        if odd:
            raise CorlError(
                f"{file}: names {odd[0]} in a form DeepSpeed never writes, which could reach other code. Only "
                f"if you made this checkpoint yourself, resume with {UNSAFE_FLAG}"
            )
        _check_installed(file)


def _check_installed(file: Path) -> None:
    # lazy: deepspeed
    import deepspeed

    if deepspeed.__version__ != AUDITED_DEEPSPEED:
        raise CorlError(
            f"{file}: DeepSpeed {deepspeed.__version__} is installed, but corl-vl checked the classes DeepSpeed "
            f"checkpoints contain against {AUDITED_DEEPSPEED} only (pip install deepspeed=={AUDITED_DEEPSPEED}); "
            f"only if you made this checkpoint yourself, resume with {UNSAFE_FLAG}"
        )
    bad = audit_classes(_installed_classes())
    if bad:  # an edited installation: the version matches, the classes do not
        raise CorlError(
            f"{file}: the installed DeepSpeed's {bad[0]} can run code when unpickled (an edited installation?); "
            f"only if you made this checkpoint yourself, resume with {UNSAFE_FLAG}"
        )
