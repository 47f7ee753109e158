"""Where corl-vl keeps caches and outputs.

Everything cached (tiny checkpoints, the HF cache, torch extensions, vLLM's cache, temp files) lives in one
folder so a user can see, move or delete it: ``$CORL_VL_CACHE`` if set, else ``.cache/`` in the source checkout
(git-ignored), else ``~/.cache/corl-vl`` for a non-editable install.
"""

from __future__ import annotations

import os
from pathlib import Path

from corl_vl.errors import CorlError

_SOURCE_ROOT = Path(__file__).resolve().parent.parent


def project_root() -> Path | None:
    """The source checkout this package runs from, or None for a site-packages install."""
    return _SOURCE_ROOT if (_SOURCE_ROOT / "pyproject.toml").exists() else None


def cache_dir() -> Path:
    """The one cache folder (created on demand); a path that cannot be that folder is one :class:`CorlError`
    line naming ``CORL_VL_CACHE`` (a file there, or a file or unwritable folder above it)."""
    env = os.environ.get("CORL_VL_CACHE")
    if env:
        path = Path(env).expanduser()
    elif project_root() is not None:
        path = project_root() / ".cache"
    else:
        path = Path.home() / ".cache" / "corl-vl"
    name = f"CORL_VL_CACHE={env}" if env else f"the cache folder {path}"
    if path.exists() and not path.is_dir():
        raise CorlError(f"{name}: is a file, not a folder; point CORL_VL_CACHE at a folder (made if missing)")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise CorlError(
            f"{name}: cannot create the cache folder ({err.strerror or err}); point CORL_VL_CACHE at a writable folder"
        ) from None
    return path.resolve()


def configure_cache_env() -> None:
    """Point third-party caches into :func:`cache_dir` unless the user already chose a location.

    Called once by the CLI and the test suite before torch/transformers/vLLM/DeepSpeed are imported.
    """
    root = cache_dir()
    defaults = {
        "HF_HOME": root / "hf",
        "TORCH_EXTENSIONS_DIR": root / "torch_extensions",
        "VLLM_CACHE_ROOT": root / "vllm",
        "TRITON_CACHE_DIR": root / "triton",
        "MPLCONFIGDIR": root / "matplotlib",
    }
    for key, value in defaults.items():
        if key not in os.environ:
            try:
                value.mkdir(parents=True, exist_ok=True)
            except OSError as err:  # e.g. a file named hf/ inside the cache folder
                raise CorlError(f"{value}: cannot create this cache folder ({err.strerror or err})") from None
            os.environ[key] = str(value)
    # corl-vl draws its own (rich) progress; the per-file tqdm bars of hub/transformers/datasets only add noise.
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault(
        "VLLM_LOGGING_LEVEL", "WARNING"
    )  # vLLM's per-request INFO lines drown the progress bar
