"""Adapter registry: names → :class:`ModelAdapter` classes, from built-ins and third-party plugins.

Why: a user must be able to add a model family without editing corl-vl. A package declares an entry point in
the group ``corl_vl.adapters`` (``name = "package.module:AdapterClass"``, or a module whose import runs
``@register_adapter``); the registry loads that group lazily, once, on the first lookup. Everything that turns a
model name into an adapter — presets, tiny checkpoints, a local folder's ``config.model_type`` — lives here, so
family detection never leaks out of ``model_adapters/``.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar

from corl_vl.errors import CorlError

from .base import ModelAdapter
from .builtins import BUILTINS
from .full_size import ensure_full_size
from .presets import all_presets, get_preset
from .templates import read_prompt_record
from .tiny import ensure_tiny

ENTRY_POINT_GROUP = "corl_vl.adapters"

_ADAPTERS: dict[str, type[ModelAdapter]] = {}
_ORIGIN: dict[str, str] = {}  # name → "built-in" or the distribution that provided it
_loaded = False

A = TypeVar("A", bound=type[ModelAdapter])

__all__ = [
    "ENTRY_POINT_GROUP",
    "adapter_origin",
    "create_adapter",
    "default_template_date",
    "detect_adapter",
    "get_adapter_class",
    "list_adapters",
    "register_adapter",
    "reload_plugins",
    "resolve_model",
]


def register_adapter(name: str) -> Callable[[A], A]:
    """Class decorator: ``@register_adapter("my_family")`` registers the class under ``name`` and sets ``.name``.

    A second, different class under an existing name is rejected (plugins must not silently replace each
    other); re-running the same definition (a module re-import) replaces it.
    """
    if not name or not name.replace("_", "").replace("-", "").replace(".", "").isalnum():
        raise CorlError(f"invalid adapter name {name!r}: use letters, digits, '_', '-', '.'")

    def decorator(cls: A) -> A:
        _add(name, cls, origin=_origin_of(cls))
        return cls

    return decorator


def _origin_of(cls: type) -> str:
    module = cls.__module__
    return "built-in" if module.split(".")[0] == __name__.split(".")[0] else module.split(".")[0]


def _add(name: str, cls: type, *, origin: str) -> None:
    if not (isinstance(cls, type) and issubclass(cls, ModelAdapter)):
        raise CorlError(f"adapter '{name}' ({origin}): {cls!r} is not a ModelAdapter subclass")
    existing = _ADAPTERS.get(name)
    if existing is not None and existing is not cls:
        same_definition = (existing.__module__, existing.__qualname__) == (cls.__module__, cls.__qualname__)
        if not same_definition:
            raise CorlError(
                f"adapter name '{name}' registered twice: {existing.__module__}.{existing.__qualname__} "
                f"({_ORIGIN[name]}) and {cls.__module__}.{cls.__qualname__} ({origin})"
            )
    cls.name = name
    _ADAPTERS[name] = cls
    _ORIGIN[name] = origin


def _ensure_loaded() -> None:
    """Import the built-in families (:data:`~model_adapters.builtins.BUILTINS`), then every entry point of the
    group (once per process): a built-in registers exactly as a plug-in does."""
    global _loaded
    if _loaded:
        return
    _loaded = True  # set first: a plugin importing this module must not recurse
    for module in BUILTINS:
        importlib.import_module(module)
    for ep in sorted(metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
        _load_entry_point(ep)


def _load_entry_point(ep: metadata.EntryPoint) -> None:
    dist = ep.dist.name if ep.dist is not None else ep.value
    try:
        obj = ep.load()
    except Exception as err:  # a broken plugin must name itself, not crash with a bare ImportError
        raise CorlError(f"adapter plugin '{ep.name}' from {dist} ({ep.value}) failed to load: {err}") from err
    if isinstance(obj, ModuleType):
        if ep.name not in _ADAPTERS:
            raise CorlError(
                f"adapter plugin '{ep.name}' from {dist}: module {ep.value} registered no adapter named '{ep.name}'"
            )
        _ORIGIN[ep.name] = dist
        return
    _add(ep.name, obj, origin=dist)


def reload_plugins() -> None:
    """Forget the entry-point scan so the next lookup re-reads it (after installing a plugin at run time)."""
    global _loaded
    _loaded = False
    importlib.invalidate_caches()  # path finders cache directory listings; metadata is re-read on each scan


def list_adapters() -> dict[str, type[ModelAdapter]]:
    """All registered adapters, built-ins and plugins, by name (sorted)."""
    _ensure_loaded()
    return dict(sorted(_ADAPTERS.items()))


def adapter_origin(name: str) -> str:
    """Where an adapter came from: ``built-in`` or the plugin distribution's name."""
    get_adapter_class(name)
    return _ORIGIN[name]


def get_adapter_class(name: str) -> type[ModelAdapter]:
    """The adapter class called ``name``; unknown names are one error listing what exists."""
    _ensure_loaded()
    try:
        return _ADAPTERS[name]
    except KeyError:
        raise CorlError(f"unknown adapter '{name}'; known adapters: {', '.join(sorted(_ADAPTERS))}") from None


def detect_adapter(model_dir: str | Path) -> str:
    """The adapter for a local checkpoint folder, chosen by its ``config.json`` ``model_type``."""
    config_path = Path(model_dir) / "config.json"
    if not config_path.is_file():
        raise CorlError(f"{config_path}: not found (is {model_dir} a Hugging Face checkpoint folder?)")
    return _adapter_for_config(config_path)


def detect_hub_adapter(repo_id: str) -> str:
    """The adapter for a hub id, from its ``config.json`` (the HF cache first, so it works offline once seen)."""
    from huggingface_hub import hf_hub_download  # lazy: huggingface_hub (with httpx; only for a hub id)

    try:
        config_path = hf_hub_download(repo_id, "config.json")
    except Exception as err:  # offline, unknown repo, gated model: all mean "cannot tell the family"
        raise CorlError(
            f"cannot read config.json of hub id '{repo_id}' ({type(err).__name__}); pass the adapter "
            f"explicitly (adapter: in the config, --adapter on the CLI) or use a preset: {', '.join(all_presets())}"
        ) from None
    return _adapter_for_config(Path(config_path))


def _adapter_for_config(config_path: Path) -> str:
    try:
        model_type = json.loads(config_path.read_text())["model_type"]
    except (json.JSONDecodeError, KeyError, TypeError) as err:
        raise CorlError(f"{config_path}: cannot read field 'model_type' ({err})") from None
    matches = [name for name, cls in list_adapters().items() if model_type in cls.model_types]
    if not matches:
        known = sorted({t for cls in _ADAPTERS.values() for t in cls.model_types})
        raise CorlError(
            f"{config_path}: no adapter for model_type '{model_type}'; supported: {', '.join(known)} "
            f"(or pass an adapter name explicitly)"
        )
    if len(matches) > 1:
        raise CorlError(
            f"{config_path}: model_type '{model_type}' is claimed by adapters {', '.join(matches)}; pick one"
        )
    return matches[0]


def resolve_model(model: str | Path, *, adapter: str | None = None) -> tuple[str, str, dict[str, Any]]:
    """``model`` (preset name, local folder, or hub id ``org/name``) → (adapter name, weights path, defaults).

    Tiny presets are built on first use (cached) by :func:`model_adapters.tiny.ensure_tiny`.
    """
    spec = str(model)
    if spec in all_presets():
        preset = get_preset(spec)
        if preset.tiny is not None:
            path = str(ensure_tiny(preset.tiny))
        elif preset.random:
            path = str(ensure_full_size(preset.name))
        else:
            path = str(preset.hub_id)
        return adapter or preset.adapter, path, dict(preset.defaults)
    if Path(spec).is_dir():
        return adapter or detect_adapter(spec), spec, {}
    if spec.count("/") != 1 or spec.startswith((".", "/", "~")):
        raise CorlError(
            f"unknown model '{spec}': not a preset, not a local folder, not a hub id (org/name); "
            f"presets: {', '.join(all_presets())}"
        )
    return adapter or detect_hub_adapter(spec), spec, {}


def default_template_date(model: str | Path, *, adapter: str | None = None) -> str:
    """The date ``create_adapter(model)`` pins its chat template to when none is given: the one recorded in a
    corl-vl checkpoint folder, else the adapter's default. Builds nothing (no tiny checkpoint, no weights)."""
    spec = str(model)
    if spec in all_presets():
        name = adapter or get_preset(spec).adapter
    else:
        if Path(spec).is_dir():
            recorded = (read_prompt_record(spec) or {}).get("template_date")
            if recorded:
                return str(recorded)
        name = resolve_model(spec, adapter=adapter)[0]
    return get_adapter_class(name).default_template_date


def create_adapter(model: str | Path, *, adapter: str | None = None, **kwargs: Any) -> ModelAdapter:
    """Build the adapter for a preset name, a local checkpoint folder, or a hub id (family read from its config).

    Keyword arguments go to the adapter's constructor and override the preset's defaults.
    """
    name, path, defaults = resolve_model(model, adapter=adapter)
    return get_adapter_class(name)(path, **{**defaults, **kwargs})
