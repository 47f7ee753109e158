"""The model families the shared adapter tests run over: the built-in tiny presets plus every installed plugin.

Plugins reach the tests the way they reach users: the example plugins under ``examples/adapters/`` are
pip-installed (their own pyproject, ``--no-deps``) into a private target folder in the project cache, that folder
goes on ``sys.path``, and the registry rescans the ``corl_vl.adapters`` entry points. Every adapter a plugin
registered whose class offers :meth:`~model_adapters.base.ModelAdapter.tiny_checkpoint` then joins the
parametrisation as ``plugin:<adapter name>`` — as does any plugin a user installed into the environment.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from corl_vl.paths import cache_dir
from model_adapters import ModelAdapter, registry

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "adapters"
BUILTIN_VLMS = ["tiny-qwen2.5-vl", "tiny-internvl3.5", "tiny-gemma3", "tiny-qwen3-vl"]
BUILTIN_TEXT = ["tiny-qwen2.5", "tiny-llama3", "tiny-qwen3"]
PLUGIN = "plugin:"


def _source_hash(folder: Path) -> str:
    digest = hashlib.sha256()
    skip = ("egg-info", "__pycache__", "/build/")  # left next to the sources by setuptools or an import
    for path in sorted(p for p in folder.rglob("*") if p.is_file() and not any(s in str(p) for s in skip)):
        digest.update(str(path.relative_to(folder)).encode() + path.read_bytes())
    return digest.hexdigest()[:12]


def install_example_plugin(name: str) -> Path:
    """``examples/adapters/<name>`` pip-installed into a cached private target (rebuilt when its sources change);
    returns the target folder (not yet on ``sys.path``)."""
    source = EXAMPLES / name
    target = cache_dir() / "test_plugins" / f"{name}-{_source_hash(source)}"
    if (target / ".complete").exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as work:
        copy = Path(work) / "src"
        shutil.copytree(source, copy)  # setuptools writes build/ and egg-info next to the sources
        staged = Path(work) / "site"
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "--quiet",
                "--no-deps",
                "--no-build-isolation",
                "--no-index",
                "--target",
                str(staged),
                str(copy),
            ],
            check=True,
        )
        (staged / ".complete").write_text("")
        try:
            staged.rename(target)
        except OSError:  # another process installed it first
            if not (target / ".complete").exists():
                raise
    return target


def activate_example_plugins() -> list[str]:
    """Install every example plugin, put it on ``sys.path`` and rescan the entry points; returns their folders."""
    folders = []
    for source in sorted(p.parent for p in EXAMPLES.glob("*/pyproject.toml")):
        target = str(install_example_plugin(source.name))
        if target not in sys.path:
            sys.path.insert(0, target)
        folders.append(target)
    registry.reload_plugins()
    return folders


def plugin_families() -> list[str]:
    """``plugin:<name>`` for every plugin adapter (any origin but built-in) that ships a tiny checkpoint."""
    activate_example_plugins()
    names = []
    for name, cls in registry.list_adapters().items():
        offers_tiny = cls.tiny_checkpoint.__func__ is not ModelAdapter.tiny_checkpoint.__func__
        if registry.adapter_origin(name) != "built-in" and offers_tiny:
            names.append(PLUGIN + name)
    return names


def family_adapter(family: str, **kwargs):
    """The adapter of a family id: a tiny preset name, or ``plugin:<name>`` (its own tiny checkpoint)."""
    if family.startswith(PLUGIN):
        name = family[len(PLUGIN) :]
        cls = registry.get_adapter_class(name)
        return registry.create_adapter(cls.tiny_checkpoint(), adapter=name, **kwargs)
    return registry.create_adapter(family, **kwargs)


PLUGINS = plugin_families()
VLMS = BUILTIN_VLMS + PLUGINS  # every plugin here is a VLM; a text plugin would set supports_images = False
FAMILIES = VLMS + BUILTIN_TEXT
