"""The wheel folder that travels to an offline GPU node whose image lacks some of corl-vl's dependencies.

Why: the GPU node can fetch nothing, and only a small folder travels with the project (64 MiB per call). Its
image already holds torch, transformers, accelerate, peft, timm, safetensors (and what they pull in: numpy,
pillow, pyyaml, huggingface-hub, tokenizers, torchvision …). The bundle holds corl-vl itself and the
*pure-Python* wheels the validation path imports that such an image lacks; pure, so one folder installs on
any Python 3.12 there. What cannot be pure is left out by name, with the reason (:data:`LEFT_OUT`).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from importlib import metadata
from pathlib import Path

MAX_BYTES = 40 * 1024 * 1024
PROJECT_FILES = ("pyproject.toml", "README.md", "corl_vl", "model_adapters")  # what the wheel is built from
PYTHON = "3.12"
# distribution names; pinned to the versions of the environment building the bundle (the tested ones)
BUNDLED = (
    "math-verify",  # answer equivalence (corl_vl.answers)
    "latex2sympy2_extended",  # math-verify's parser
    "antlr4-python3-runtime",  # its grammar runtime (4.13.2: math-verify's antlr4_13_2 extra)
    "qwen-vl-utils",  # Qwen2.5-VL's smart_resize (its video-only dependency av is not needed)
    "requests",  # imported by qwen-vl-utils at module top
    "urllib3",
    "idna",
    "certifi",
    "charset-normalizer",
    "rich",  # training progress bars (corl_vl.train.callbacks)
    "markdown-it-py",
    "mdurl",
    "pygments",
)
LEFT_OUT = {
    "datasets": "needs pyarrow, pandas and xxhash (compiled, > 40 MiB); only data loading from the hub or "
    "disk imports it, never the validation sections",
    "vllm": "compiled CUDA build (hundreds of MiB); its sections are skipped by name without it",
    "deepspeed": "compiles its ops against the node's torch; its sections are skipped by name without it",
}


def pinned(names: tuple[str, ...] = BUNDLED) -> list[str]:
    """``name==version`` for each name installed here, else the bare name (pip picks the newest)."""
    specs = []
    for name in names:
        try:
            specs.append(f"{name}=={metadata.version(name)}")
        except metadata.PackageNotFoundError:
            specs.append(name)
    return specs


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def build_bundle(out: Path, project: Path, *, pip: tuple[str, ...] = (sys.executable, "-m", "pip")) -> dict:
    """Write corl-vl's wheel and the pure-Python wheels of :data:`BUNDLED` into ``out``; check the size.

    Returns ``{"wheels": [file names], "bytes": total, "left_out": LEFT_OUT}``; raises ``SystemExit`` with one
    line when pip fails, a wheel is not pure Python, or the folder exceeds :data:`MAX_BYTES`.
    """
    out.mkdir(parents=True, exist_ok=True)
    # only py3-none-any wheels match these tags: pure Python, installable on any CPython 3.12 platform
    download = [
        *pip,
        "download",
        "--only-binary=:all:",
        "--no-deps",
        "--python-version",
        PYTHON,
        "--implementation",
        "py",
        "--abi",
        "none",
        "--platform",
        "any",
        "-d",
        str(out),
        *pinned(),
    ]
    with tempfile.TemporaryDirectory() as tmp:  # a copy: building in the checkout leaves build/ behind
        source = Path(tmp) / "corl-vl"
        source.mkdir()
        for name in PROJECT_FILES:
            if (project / name).is_dir():
                shutil.copytree(project / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                shutil.copy2(project / name, source / name)
        own = [*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(out), str(source)]
        for cmd in (download, own):
            proc = subprocess.run(cmd, capture_output=True, text=True)
            if proc.returncode != 0:
                last = (proc.stderr.strip() or proc.stdout.strip()).splitlines()[-1:] or ["(no output)"]
                raise SystemExit(f"bundle: `{' '.join(cmd[:4])} …` failed: {last[0]}")
    wheels = sorted(p.name for p in out.iterdir() if p.is_file())
    impure = [w for w in wheels if not w.endswith("-none-any.whl")]
    if impure:
        raise SystemExit(f"bundle: {out}: {impure[0]} is not a pure-Python wheel; remove it and rebuild")
    size = folder_bytes(out)
    if size > MAX_BYTES:
        raise SystemExit(
            f"bundle: {out} holds {size / 2**20:.1f} MiB, over the {MAX_BYTES / 2**20:.0f} MiB that may travel; "
            "empty the folder and rebuild"
        )
    return {"wheels": wheels, "bytes": size, "left_out": dict(LEFT_OUT)}
