"""Rewards from outside the package: a user's file (``reward.module: path/to/file.py:function``) or an installed
distribution's entry point in the group ``corl_vl.rewards``.

Both are **trusted code**: loading them runs them with the trainer's rights, exactly like importing a Python
module. Only point ``reward.module`` at files you wrote or reviewed; model output never reaches this loader.

A function loaded this way is registered under its own name (entry points: under the entry point's name) unless
the file registered it itself with :func:`~corl_vl.rewards.registry.register_reward`; ``reward.name`` or a
``reward.combine`` entry then names it. This module only imports; the registry registers
(:func:`corl_vl.rewards.registry.load_reward_module`), so the two do not import each other.
"""

from __future__ import annotations

import hashlib
import importlib.util
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

from corl_vl.errors import CorlError

Loaded = tuple[str, Any, str]  # (name to register under, the function, where it came from)

ENTRY_POINT_GROUP = "corl_vl.rewards"
_scanned = False


def import_reward_file(spec: str) -> Loaded:
    """Import ``path/to/file.py:function`` (trusted code): its name, the function and the file."""
    path_text, sep, attr = spec.rpartition(":")
    if not sep or not path_text or not attr.isidentifier():
        raise CorlError(f"reward.module: expected path/to/file.py:function, got '{spec}'")
    path = Path(path_text).expanduser().resolve()
    if not path.is_file():
        raise CorlError(f"reward.module: {path_text} is not a file")
    # one module per file, so loading the same file twice (config check, then the run) registers once
    name = f"corl_vl_reward_plugin_{hashlib.sha1(str(path).encode()).hexdigest()[:12]}"
    module = sys.modules.get(name)
    if module is None:
        loader_spec = importlib.util.spec_from_file_location(name, path)
        if loader_spec is None or loader_spec.loader is None:
            raise CorlError(f"reward.module: {path_text} cannot be imported as a Python file")
        module = importlib.util.module_from_spec(loader_spec)
        sys.modules[name] = module
        try:
            loader_spec.loader.exec_module(module)
        except Exception as err:  # the user's code: its first line of error, with the file named
            del sys.modules[name]
            raise CorlError(
                f"reward.module: {path_text} failed to load: {type(err).__name__}: {err}"
            ) from err
    function = getattr(module, attr, None)
    if not callable(function):
        raise CorlError(f"reward.module: {path_text} has no function '{attr}'")
    return attr, function, path_text


def entry_point_rewards() -> list[Loaded]:
    """Every reward of the ``corl_vl.rewards`` entry-point group, loaded; empty after the first scan of the
    process (until :func:`rescan_entry_points`)."""
    global _scanned
    if _scanned:
        return []
    _scanned = True  # first: a plugin importing the registry must not recurse
    loaded: list[Loaded] = []
    for ep in sorted(metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
        dist = ep.dist.name if ep.dist is not None else ep.value
        try:
            obj = ep.load()
        except Exception as err:
            raise CorlError(
                f"reward plugin '{ep.name}' from {dist} ({ep.value}) failed to load: {err}"
            ) from err
        if not callable(obj):
            raise CorlError(f"reward plugin '{ep.name}' from {dist}: {ep.value} is not a function")
        loaded.append((ep.name, obj, dist))
    return loaded


def rescan_entry_points() -> None:
    """Forget the entry-point scan (after installing a plugin at run time)."""
    global _scanned
    _scanned = False
    importlib.invalidate_caches()
