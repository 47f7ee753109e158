"""``--resume`` continues *the same run*: compare the new effective config with the run's ``config.yaml``.

Why: a resume with another K, learning rate, reward or model, accepted silently, would overwrite
``config.yaml`` with the new settings, and the run's record would no longer describe its checkpoints. Every key
whose change alters training is refused, each one named with its old and new value; the user may opt in per
key (``--allow-config-change KEY …``), and an accepted change is appended to the ``history`` list in
``config.yaml``, so the record says what changed and at which step.

Keys that only move the run's bookkeeping, memory or speed (``train.save_every``, ``train.plot``,
``train.output_dir``, ``train.stall_steps``, ``train.report_to``, ``eval.*``, rollout memory knobs, ``distributed.backend``) may
change freely.
``train.max_steps`` is free too when the learning-rate schedule does not depend on it (constant, no warm-up).
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from corl_vl.errors import CorlError
from corl_vl.typed_yaml import load_yaml

# exact keys or dotted prefixes that never change what is trained
FREE_KEYS = (
    "train.save_every",
    "train.output_dir",
    "train.plot",
    "eval",
    "rollout.gpu_memory_utilization",
    "rollout.kv_cache_memory_bytes",
    "rollout.sleep_between_phases",
    "distributed.backend",
    "train.stall_steps",
    "train.report_to",
    "train.log_entropy",  # one more logged metric
    "train.parallel_agents",  # threads; results identical to one agent after another
)
HISTORY = "history"


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict):
        items = value.items()
    elif isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        items = ((str(i), v) for i, v in enumerate(value))  # agents.0.lr …
    else:
        return {prefix: value}
    out: dict[str, Any] = {}
    for key, inner in items:
        out.update(_flatten(inner, f"{prefix}.{key}" if prefix else str(key)))
    return out


def _matches(key: str, patterns: tuple[str, ...] | list[str]) -> bool:
    return any(key == p or key.startswith(p + ".") for p in patterns)


def _schedule_uses_max_steps(flat: dict[str, Any]) -> bool:
    return flat.get("train.scheduler") != "constant" or bool(flat.get("train.warmup_ratio"))


def differences(
    saved: dict[str, Any], current: dict[str, Any], defaults: dict[str, Any] | None = None
) -> dict[str, tuple[Any, Any]]:
    """``{key: (saved value, current value)}`` for every leaf that differs (missing on one side → None).

    ``defaults``: the config's default values; a key the saved record lacks (it was written by a version
    without that setting) counts as its default, so upgrading corl-vl does not block a resume.
    """
    a, b = _flatten(saved), _flatten(current)
    for key, value in _flatten(defaults or {}).items():
        if not _covered(key, a):  # a default list/dict is one key; a saved non-empty one is its items
            a[key] = value
    a, b = ({k: _unset(v) for k, v in side.items()} for side in (a, b))
    return {k: (a.get(k), b.get(k)) for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)}


def _unset(value: Any) -> Any:
    """An empty list or mapping says the same as an unset key (``reward.combine: []``, ``train.freeze: []``)."""
    return None if isinstance(value, list | tuple | dict) and not value else value


def _covered(key: str, flat: dict[str, Any]) -> bool:
    """Whether ``flat`` holds ``key``, an item under it, or a key above it."""
    parts = key.split(".")
    above = {".".join(parts[:i]) for i in range(1, len(parts))}
    return key in flat or any(k in above or k.startswith(key + ".") for k in flat)


def training_changes(diffs: dict[str, tuple[Any, Any]], current: dict[str, Any]) -> list[str]:
    """The keys of ``diffs`` that change what is trained."""
    flat = _flatten(current)
    keys = []
    for key in diffs:
        if _matches(key, FREE_KEYS):
            continue
        if key == "train.max_steps" and not _schedule_uses_max_steps(flat):
            continue
        keys.append(key)
    return keys


def read_run_config(path: str | Path) -> tuple[dict[str, Any], list[Any]]:
    """A run's ``config.yaml`` as (config mapping, history list)."""
    path = Path(path)
    try:
        raw = load_yaml(path.read_text(encoding="utf-8"), str(path))
    except FileNotFoundError:
        raise CorlError(f"{path}: missing; cannot check that --resume continues the same run") from None
    except (OSError, yaml.YAMLError) as err:
        raise CorlError(f"{path}: unreadable run record ({err})") from None
    if not isinstance(raw, dict):
        raise CorlError(f"{path}: not a run config (expected a mapping)")
    history = raw.pop(HISTORY, None) or []
    return raw, list(history)


def _show(value: Any) -> str:
    return (
        "(unset)"
        if value is None
        else yaml.safe_dump(value, default_flow_style=True).strip().removesuffix("\n...")
    )


def check_resume(
    saved_path: str | Path,
    current: dict[str, Any],
    *,
    allow: list[str] | None = None,
    step: int | None = None,
    defaults: dict[str, Any] | None = None,
    normalize: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """Refuse a resume whose config changes training, except the keys in ``allow``. ``normalize``: applied to
    the saved record before comparing (an older record's relative file paths, :mod:`corl_vl.train.run_paths`).

    Returns the mapping to write as the run's new ``config.yaml``: ``current`` plus its history, with one new
    entry (step, time, every changed key's old and new value) when anything differs.
    """
    saved, history = read_run_config(saved_path)
    if normalize is not None:
        saved = normalize(saved)
    diffs = differences(saved, current, defaults)
    allow = list(allow or [])
    refused = [k for k in training_changes(diffs, current) if not _matches(k, allow)]
    if refused:
        listed = "; ".join(f"{k}: {_show(diffs[k][0])} → {_show(diffs[k][1])}" for k in refused)
        raise CorlError(
            f"--resume: the settings differ from the run's {Path(saved_path).name} in what is trained ({listed}). "
            f"Resume with the original settings, start a new run with another --output-dir, or accept the "
            f"change with --allow-config-change {' '.join(refused)}"
        )
    record = dict(current)
    if diffs:
        entry = {
            "resumed_at_step": step,
            "time": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "changed": {k: {"from": old, "to": new} for k, (old, new) in diffs.items()},
        }
        history = [*history, entry]
    if history:
        record[HISTORY] = history
    return record
