"""Config-time checks of every number and every name that becomes a path, in one line each, before models load.

Why here and by field name: the config's sections move (a setting may live under ``topology:`` today and
``reward:`` tomorrow), but what a value *means* follows its name. So the checks walk the dataclass tree
(``dataclasses.fields``) and look each field's name up in :data:`RANGES`; a number without a rule is still
checked to be finite. A NaN learning rate, a negative clip or ``temperature: .inf`` would otherwise reach torch
after the models load, or train silently wrong (a negative ``importance_ratio_cap`` reverses the update).

Names (agents today; runs, benchmarks and recipes through :func:`check_name`) become folder names, so they must
be plain: ``[A-Za-z0-9._-]``, no leading dot (no ``..``, no hidden folders), at most :data:`MAX_NAME` characters,
and unique even on a case-insensitive file system.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable, Sequence
from typing import Any

from corl_vl.errors import CorlError

Bad = Callable[[str, str], CorlError]  # (key, message) → the error to raise, naming the config's source

NAME_RE = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]*")
MAX_NAME = 128


def _above(low: float) -> tuple[Callable[[float], bool], str]:
    return (lambda v: v > low), f"> {low:g}"


def _at_least(low: float) -> tuple[Callable[[float], bool], str]:
    return (lambda v: v >= low), f"≥ {low:g}"


def _within(low: float, high: float, *, low_open: bool = False, high_open: bool = False) -> Any:
    def ok(v: float) -> bool:
        return (v > low if low_open else v >= low) and (v < high if high_open else v <= high)

    return ok, f"in {'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"


# field name → (predicate, the range in words[, why]); a field of that name in any section obeys it
RANGES: dict[str, tuple[Any, ...]] = {
    "lr": (*_above(0), "a learning rate ≤ 0 does not train or trains backwards"),
    "adam_betas": (*_within(0, 1, high_open=True), "each Adam beta"),
    "weight_decay": _at_least(0),
    "grad_clip": (*_at_least(0), "0 means no clipping"),
    "warmup_ratio": _within(0, 1, high_open=True),
    "temperature": _above(0),
    "top_p": _within(0, 1, low_open=True),
    "epsilon": (*_above(0), "the PPO clip range; ≤ 0 clips every token"),
    "epsilon_high": (*_at_least(0), "the upper clip range; unset means grpo.epsilon"),
    "importance_ratio_cap": (*_at_least(0), "0 turns the correction off; a negative cap reverses the update"),
    "beta": (*_at_least(0), "the KL weight to the reference model; 0 turns the reference off"),
    "min_share": _within(0, 1),
    "min_weight_share": _within(0, 1),
    "reliability_ema": _within(0, 1, high_open=True),
    "gpu_memory_utilization": _within(0, 1, low_open=True),
    "kv_cache_memory_bytes": _above(0),
    "vllm_min_params": _at_least(0),
    "max_model_len": (
        *_at_least(1),
        "vLLM's context in tokens; null sizes it to the longest prompt + max_new_tokens",
    ),
    "max_images_per_prompt": _at_least(1),
    "batch_size": _at_least(1),
    "k": _at_least(1),
    "max_new_tokens": _at_least(1),
    "min_new_tokens": _at_least(0),
    "micro_batch_size": _at_least(1),
    "updates_per_batch": _at_least(1),
    "problems_per_step": _at_least(1),
    "limit": _at_least(1),
    "max_steps": _at_least(1),
    "save_every": (*_at_least(0), "0 saves only at the end"),
    "stall_steps": (*_at_least(0), "0 turns stall detection off"),
    "every": (*_at_least(0), "0 turns periodic evaluation off"),
    "r": (*_at_least(1), "the LoRA rank"),
    "alpha": (*_above(0), "LoRA's scale is alpha / r"),
    "dropout": (*_within(0, 1, high_open=True), "LoRA's dropout probability"),
    "max_pixels": (*_at_least(1), "pixels per image"),
    "min_pixels": (*_at_least(1), "pixels per image"),
    # the warm-start settings an experiment passes on (a plain mapping: check_mapping)
    "steps": _at_least(1),
    "labels_per_skill": _at_least(1),
    "weak_fraction": _within(0, 1),
    "weak_error_rate": _within(0, 1),
}


def _numbers(value: Any) -> list[float] | None:
    """The numbers a field holds (one, or each of a tuple/list of numbers); None for anything else."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return [value]
    if isinstance(value, (list, tuple)) and value and all(_numbers(v) is not None for v in value):
        return [float(v) for v in value]
    return None


def _walk(node: Any, prefix: str) -> list[tuple[str, str, Any]]:
    """(dotted key, field name, value) of every leaf field under a dataclass, through lists of dataclasses."""
    leaves = []
    for f in dataclasses.fields(node):
        value = getattr(node, f.name)
        key = f"{prefix}{f.name}"
        if dataclasses.is_dataclass(value):
            leaves += _walk(value, f"{key}.")
        elif isinstance(value, list) and value and all(dataclasses.is_dataclass(v) for v in value):
            for i, item in enumerate(value):
                leaves += _walk(item, f"{key}.{i}.")
        else:
            leaves.append((key, f.name, value))
    return leaves


def check_values(cfg: Any, bad: Bad) -> None:
    """Every number in ``cfg`` finite and in its field's range (:data:`RANGES`); raises ``bad(key, msg)``."""
    _check_leaves(_walk(cfg, ""), bad)


def check_mapping(values: dict[str, Any], prefix: str, bad: Bad) -> None:
    """The same rules for a plain mapping of settings (an experiment's warm start, handed on as keywords)."""
    _check_leaves([(f"{prefix}{k}", k, v) for k, v in values.items()], bad)


def _check_leaves(leaves: list[tuple[str, str, Any]], bad: Bad) -> None:
    for key, name, value in leaves:
        numbers = _numbers(value)
        if numbers is None:
            continue
        shown = list(value) if isinstance(value, (list, tuple)) else value
        if not all(math.isfinite(v) for v in numbers):
            raise bad(key, f"must be a finite number, got {shown}")
        rule = RANGES.get(name)
        if rule is not None and not all(rule[0](v) for v in numbers):
            why = f" ({rule[2]})" if len(rule) > 2 else ""
            raise bad(key, f"must be {rule[1]}{why}, got {shown}")


def name_problem(name: Any) -> str | None:
    """Why ``name`` cannot be a folder name, or None when it can."""
    if not isinstance(name, str):
        return f"must be a string, got {type(name).__name__} {name!r}"
    if not name:
        return "must not be empty"
    if len(name) > MAX_NAME:
        return f"must be at most {MAX_NAME} characters, got {len(name)}"
    if not NAME_RE.fullmatch(name):
        return f"{name!r} may use only letters, digits, '.', '_' and '-', and must not start with '.'"
    return None


def check_name(name: Any, what: str) -> str:
    """``name`` if it is a plain folder name, else a one-line :class:`CorlError` starting with ``what``."""
    problem = name_problem(name)
    if problem is not None:
        raise CorlError(f"{what}: {problem} (it becomes a folder name)")
    return name


def check_names(names: list[Any], key: str, bad: Bad) -> None:
    """Each name plain (:func:`name_problem`) and unique, also ignoring case (``Agent`` and ``agent`` share a
    folder on macOS and Windows); raises ``bad(key.i, msg)``."""
    seen: dict[str, int] = {}
    for i, name in enumerate(names):
        problem = name_problem(name)
        if problem is not None:
            raise bad(f"{key}.{i}.name", f"{problem} (it becomes a folder name; set {key}.{i}.name to one)")
        folded = name.casefold()
        if folded in seen:
            raise bad(
                f"{key}.{i}.name",
                f"{name!r} is already the name of {key}.{seen[folded]} (names must be unique, ignoring case)",
            )
        seen[folded] = i


def check_config(cfg: Any, bad: Bad) -> None:
    """All config-time checks of this module: agent names, then every number."""
    check_names([a.name for a in cfg.agents], "agents", bad)
    check_values(cfg, bad)


# agents[i].devices: here, not in train/device_placement.py (which places them), so the config checks need no
# trainer module
DEVICE_NAME = re.compile(r"cpu|cuda(?::(\d+))?")


def normalise_device(name: str) -> str | None:
    """``cpu`` or ``cuda:N`` (``cuda`` is ``cuda:0``); None for anything else."""
    match = DEVICE_NAME.fullmatch(str(name).strip())
    if match is None:
        return None
    if name.strip() == "cpu":
        return "cpu"
    return f"cuda:{match.group(1) or 0}"


def check_device_names(agents: Sequence[Any], bad: Any) -> None:
    """Config-time check of ``agents[i].devices``: a non-empty list of device names, not mixing cpu and cuda."""
    for i, agent in enumerate(agents):
        if agent.devices is None:
            continue
        key = f"agents.{i}.devices"
        if not agent.devices:
            raise bad(
                key, "an empty list; leave it out to have the agent placed, or name a device like cuda:0"
            )
        names = [normalise_device(d) for d in agent.devices]
        for raw, name in zip(agent.devices, names):
            if name is None:
                raise bad(key, f"'{raw}' is not a device name; use cpu, cuda or cuda:N")
        if "cpu" in names and len(names) > 1:
            raise bad(key, "cpu cannot be part of a block of devices; name cpu alone or only cuda:N devices")
        if len(set(names)) != len(names):
            raise bad(key, f"names a device twice: {agent.devices}")
