"""benchmarks/gpu/bundle.py: the wheel folder for an offline GPU node, built here with pip (PyPI), then installed
offline on top of an environment that holds only the image's packages, where ``corl-vl --help`` must answer."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks" / "gpu"))

import bundle  # noqa: E402

# the GPU image's packages that this environment has (peft is in the image but not a corl-vl dependency here)
IMAGE = ("torch", "transformers", "accelerate", "timm", "safetensors")


def _closure(names: tuple[str, ...]) -> set[str]:
    """These distributions and everything they require here (markers evaluated, extras not followed)."""
    seen: set[str] = set()
    todo = list(names)
    while todo:
        name = todo.pop()
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue  # an optional or platform-only requirement not installed here
        key = dist.metadata["Name"].lower()
        if key in seen:
            continue
        seen.add(key)
        for line in dist.requires or []:
            req = Requirement(line)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    return seen


def _image_site(folder: Path) -> Path:
    """A folder exposing only the image's packages (links into this environment's site-packages)."""
    folder.mkdir()
    for name in _closure(IMAGE):
        dist = metadata.distribution(name)
        tops = {Path(str(f)).parts[0] for f in dist.files or [] if not str(f).startswith("..")}
        for top in tops:
            source = Path(str(dist.locate_file(top)))
            if source.exists() and not (folder / top).exists() and top != "__pycache__":
                (folder / top).symlink_to(source)
    return folder


@pytest.mark.slow  # downloads the wheels from PyPI
def test_the_bundle_is_pure_small_and_installs_offline_into_an_image_only_environment(tmp_path):
    out = tmp_path / "wheels"
    result = bundle.build_bundle(out, ROOT)
    names = {w.split("-")[0].lower() for w in result["wheels"]}
    assert {
        "corl_vl",
        "math_verify",
        "latex2sympy2_extended",
        "antlr4_python3_runtime",
        "qwen_vl_utils",
    } <= names
    assert all(w.endswith("-none-any.whl") for w in result["wheels"])
    assert result["bytes"] == bundle.folder_bytes(out) <= bundle.MAX_BYTES
    assert "datasets" in result["left_out"]

    # offline install, as on the node: --no-index --no-deps --target, then PYTHONPATH
    target = tmp_path / "site"
    wheels = sorted(str(p) for p in out.iterdir())
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-index", "--no-deps", "--target", str(target), *wheels],
        check=True,
        capture_output=True,
    )
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next((venv / "lib").glob("python*/site-packages"))
    (site / "image.pth").write_text(str(_image_site(tmp_path / "image")) + "\n")
    # this CPU machine's torchvision is a CUDA build beside a CPU torch: the CPU profile's import hook
    # (docs/install.md) lets it import, as in the project's own venv; a GPU image needs none
    (site / "zz_hook.pth").write_text("import corl_vl._torchvision_cpu as _h; _h.install()\n")
    python = str(venv / "bin" / "python")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PYTHONPATH"] = str(target)
    probe = "import corl_vl, math_verify, qwen_vl_utils, rich; print(corl_vl.__file__)"
    where = subprocess.run([python, "-c", probe], env=env, cwd=tmp_path, capture_output=True, text=True)
    assert where.returncode == 0, where.stderr[-2000:]
    assert where.stdout.strip().startswith(str(target))  # the bundle's corl-vl, not this checkout
    helped = subprocess.run(
        [python, "-m", "corl_vl", "--help"], env=env, cwd=tmp_path, capture_output=True, text=True
    )
    assert helped.returncode == 0, helped.stderr[-2000:]
    assert "train" in helped.stdout and "eval" in helped.stdout
    # the environment really lacks what the bundle leaves out
    lacks = subprocess.run([python, "-c", "import datasets"], env=env, cwd=tmp_path, capture_output=True)
    assert lacks.returncode != 0
    # and the validation itself runs there: a section on the bundle's corl-vl, its JSON and table written
    validate = [
        python,
        str(ROOT / "benchmarks" / "gpu" / "validate.py"),
        "--sections",
        "logprob_tail",
        "--out",
        str(tmp_path / "out"),
    ]
    ran = subprocess.run(
        validate, env={**env, "HF_HUB_OFFLINE": "1"}, cwd=tmp_path, capture_output=True, text=True
    )
    assert ran.returncode == 0, ran.stdout[-2000:] + ran.stderr[-2000:]
    assert "| logprob_tail | 2×32, V=32000 | yes |" in ran.stdout
    assert len(list((tmp_path / "out").glob("*-cpu.*"))) == 2
