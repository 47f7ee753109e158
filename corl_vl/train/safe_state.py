"""Training state (optimizer, scheduler, sampler, RNG) as safetensors + JSON: data that cannot run code.

Why: checkpoints are passed between people, and a pickle (``torch.save`` / ``torch.load(weights_only=False)``)
runs whatever code its author put in it when it is loaded. Here every tensor goes into ``NAME.safetensors`` and
everything else (numbers, strings, lists, the nesting) into ``NAME.json``; loading parses both and never
unpickles anything.

The JSON keeps the structure exactly, so a state dict comes back as it went in: a tensor leaf is
``{"$tensor": key}``, a tuple ``{"$tuple": [...]}``, a dict with non-string keys (an optimizer's per-parameter
state is keyed by int) ``{"$items": [[key, value], ...]}``, a numpy array (numpy's RNG state)
``{"$ndarray": [...], "dtype": "uint32"}``. Python floats survive JSON exactly (shortest round-trip repr).

Old checkpoints (``*.pt`` pickles) are read by :func:`load_legacy`: with torch's restricted unpickler, which
refuses any callable that is not a plain tensor/container rebuild, unless the user vouches for the file.
"""

from __future__ import annotations

import json
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from corl_vl.errors import CorlError

_MARKERS = ("$tensor", "$tuple", "$items", "$ndarray")
UNSAFE_FLAG = "--allow-unsafe-checkpoint"


class _Encoder:
    """Walks a state, moving every tensor into ``tensors`` and returning the JSON skeleton."""

    def __init__(self) -> None:
        self.tensors: dict[str, torch.Tensor] = {}
        self._storages: set[int] = set()

    def __call__(self, obj: Any) -> Any:
        if isinstance(obj, torch.Tensor):
            key = f"t{len(self.tensors)}"
            self.tensors[key] = self._standalone(obj)
            return {"$tensor": key}
        if isinstance(obj, np.ndarray):
            return {"$ndarray": obj.tolist(), "dtype": str(obj.dtype)}
        if isinstance(obj, np.generic):
            return obj.item()
        if obj is None or isinstance(obj, (bool, int, float, str)):
            return obj
        if isinstance(obj, tuple):
            return {"$tuple": [self(v) for v in obj]}
        if isinstance(obj, list):
            return [self(v) for v in obj]
        if isinstance(obj, dict):
            if all(isinstance(k, str) and k not in _MARKERS for k in obj):
                return {k: self(v) for k, v in obj.items()}
            return {"$items": [[self(k), self(v)] for k, v in obj.items()]}
        raise TypeError(f"cannot store {type(obj).__name__} in a checkpoint (only tensors and plain data)")

    def _standalone(self, tensor: torch.Tensor) -> torch.Tensor:
        """``tensor`` on CPU as safetensors accepts it: contiguous, owning its whole storage, sharing it with no
        other entry. Copies only when needed (optimizer state at real scale is tens of GB)."""
        t = tensor.detach().to("cpu")
        whole = t.is_contiguous() and t.storage_offset() == 0 and t.untyped_storage().nbytes() == t.nbytes
        ptr = t.untyped_storage().data_ptr()
        if whole and ptr not in self._storages:
            self._storages.add(ptr)
            return t
        return t.contiguous().clone()


def _decode(obj: Any, tensors: dict[str, torch.Tensor], where: str) -> Any:
    if isinstance(obj, list):
        return [_decode(v, tensors, where) for v in obj]
    if not isinstance(obj, dict):
        return obj
    if "$tensor" in obj:
        key = obj["$tensor"]
        if key not in tensors:
            raise CorlError(f"{where}: refers to tensor '{key}', which its .safetensors file does not hold")
        return tensors[key]
    if "$tuple" in obj:
        return tuple(_decode(v, tensors, where) for v in obj["$tuple"])
    if "$items" in obj:
        return {_freeze(_decode(k, tensors, where)): _decode(v, tensors, where) for k, v in obj["$items"]}
    if "$ndarray" in obj:
        return np.asarray(obj["$ndarray"], dtype=np.dtype(obj["dtype"]))
    return {k: _decode(v, tensors, where) for k, v in obj.items()}


def _freeze(key: Any) -> Any:
    return tuple(_freeze(k) for k in key) if isinstance(key, list) else key


def save_state(state: Any, folder: str | Path, name: str) -> None:
    """Write ``state`` (nested dicts/lists/tuples of tensors, numpy arrays and plain values) as
    ``folder/name.safetensors`` + ``folder/name.json``."""
    # lazy: safetensors
    from safetensors.torch import save_file

    folder = Path(folder)
    encode = _Encoder()
    skeleton = encode(state)
    save_file(encode.tensors, str(folder / f"{name}.safetensors"))
    (folder / f"{name}.json").write_text(json.dumps(skeleton), encoding="utf-8")


def has_state(folder: str | Path, name: str) -> bool:
    return (Path(folder) / f"{name}.json").exists()


def _read_part(file: Path, read: Callable[[], Any]) -> Any:
    """``read()`` of one file of a saved state; a missing or corrupt file is one line naming it."""
    # lazy: safetensors
    from safetensors import SafetensorError

    try:
        return read()
    except FileNotFoundError:
        raise CorlError(f"{file}: missing from the checkpoint (a damaged or partial copy?)") from None
    except (ValueError, SafetensorError, OSError) as err:  # JSONDecodeError is a ValueError
        first = str(err).strip().splitlines()[0][:160] if str(err).strip() else type(err).__name__
        raise CorlError(f"{file}: unreadable checkpoint state ({first}); the checkpoint is damaged") from None


def load_state(folder: str | Path, name: str) -> Any:
    """Read what :func:`save_state` wrote; a missing or corrupt file is a one-line :class:`CorlError`."""
    # lazy: safetensors
    from safetensors.torch import load_file

    folder = Path(folder)
    meta, data = folder / f"{name}.json", folder / f"{name}.safetensors"
    skeleton = _read_part(meta, lambda: json.loads(meta.read_text(encoding="utf-8")))
    tensors = _read_part(data, lambda: load_file(str(data), device="cpu"))
    return _decode(skeleton, tensors, str(meta))


def check_pickle_globals(path: str | Path, allowed: frozenset[str] = frozenset()) -> None:
    """Refuse a torch pickle that would call anything but torch's own rebuild functions and ``allowed``.

    The check reads the pickle's opcodes without running them (``get_unsafe_globals_in_checkpoint``): a
    pickle can only call the callables it names, so a file that names nothing else is data, whoever loads it.
    """
    path = Path(path)
    try:
        named = torch.serialization.get_unsafe_globals_in_checkpoint(path)
    except Exception as err:  # not a torch checkpoint at all (truncated, another format)
        raise CorlError(
            f"{path}: not a readable torch checkpoint file ({type(err).__name__}: {err})"
        ) from None
    unknown = sorted(set(named) - allowed)
    if unknown:
        raise CorlError(
            f"{path}: loading this checkpoint file would call {', '.join(unknown[:4])}"
            f"{' …' if len(unknown) > 4 else ''}, which could run code. Only if you made this checkpoint "
            f"yourself, resume with {UNSAFE_FLAG}"
        )


def load_legacy(path: str | Path, *, allow_unsafe: bool = False) -> Any:
    """A ``.pt`` pickle from an older corl-vl (or DeepSpeed): loaded as data only (``weights_only=True``),
    which never runs code; a file that needs more is refused unless ``allow_unsafe`` (the user's own file)."""
    path = Path(path)
    if allow_unsafe:
        return torch.load(path, map_location="cpu", weights_only=False)
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, AttributeError, TypeError) as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise CorlError(
            f"{path}: this checkpoint file is a pickle that needs more than plain tensors to load, and loading "
            f"it could run code ({first[:160]}). Only if you made this checkpoint yourself, resume with "
            f"{UNSAFE_FLAG}"
        ) from None
