"""The boundary a reward plug-in runs behind (``reward.module`` files, ``corl_vl.rewards`` entry points, any
reward registered outside corl_vl).

Why: a plug-in is the user's code. What it returns goes straight into the advantages, so a NaN, a short list, a
string or a missing agent would surface steps later as a traceback or an unnamed "non-finite loss"; and its inputs
are the trainer's own answers and problems, so a plug-in that edits them would rewrite the logged answers. Here it
gets deep copies (its own ``state`` excepted: that is its memory across steps), and its output is checked (every
local agent, every problem id of this process's share, one finite number per completion, labels as text or
None) before the trainer reads it. Any failure is one :class:`~corl_vl.errors.CorlError` line naming the
plug-in, the agent and problem id, and what is wrong.
"""

from __future__ import annotations

import copy
import math
import numbers
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from corl_vl.errors import CorlError
from corl_vl.rewards.registry import Labels, RewardInputs, Rewards, RewardSpec, StepRewards


def is_plugin(spec: RewardSpec) -> bool:
    """A reward whose function was not defined inside corl_vl (built-ins are trusted to keep the contract)."""
    module = getattr(spec.function, "__module__", None) or ""
    return not (module == "corl_vl" or module.startswith("corl_vl."))


def _origin(function: Any) -> str:
    code = getattr(function, "__code__", None)
    return f" ({Path(code.co_filename).name})" if code is not None else ""


def guarded(name: str, spec: RewardSpec) -> RewardSpec:
    """``spec`` behind the boundary when it is a plug-in, else unchanged."""
    if not is_plugin(spec):
        return spec
    who = f"reward plug-in '{name}'{_origin(spec.function)}"
    return replace(spec, function=_boundary(who, spec.function))


def _boundary(
    who: str, function: Callable[[RewardInputs], StepRewards]
) -> Callable[[RewardInputs], StepRewards]:
    def call(inputs: RewardInputs) -> StepRewards:
        try:
            out = function(read_only_copy(inputs))
        except CorlError as err:  # already one line; say whose it is
            raise CorlError(f"{who} on problems {_ids(inputs.mine)}: {err}") from None
        except Exception as err:  # the user's code: its exception in one line, no traceback
            message = " ".join(str(err).split())[:300]
            raise CorlError(
                f"{who} raised {type(err).__name__}{': ' + message if message else ''} on problems "
                f"{_ids(inputs.mine)}; fix the plug-in (it must return StepRewards(rewards, labels))"
            ) from None
        return check_output(who, out, inputs)

    return call


def read_only_copy(inputs: RewardInputs) -> RewardInputs:
    """Deep copies of everything the trainer keeps using; the plug-in's own state stays its own."""
    wanted = set(inputs.ids) | set(inputs.mine)
    return replace(
        inputs,
        cfg=copy.deepcopy(inputs.cfg),
        ids=list(inputs.ids),
        mine=list(inputs.mine),
        names=list(inputs.names),
        local=list(inputs.local),
        answers=copy.deepcopy(dict(inputs.answers)),
        problems={pid: copy.deepcopy(p) for pid, p in inputs.problems.items() if pid in wanted},
        scored=copy.deepcopy(dict(inputs.scored)),
        adapters=dict(inputs.adapters),
        completions=copy.deepcopy(dict(inputs.completions)),
        token_counts=copy.deepcopy(dict(inputs.token_counts)),
    )


def _ids(ids: Sequence[str]) -> str:
    shown = ", ".join(repr(pid) for pid in ids[:4])
    return shown + (f" … ({len(ids)} in all)" if len(ids) > 4 else "")


def _kind(value: Any) -> str:
    if value is None:
        return "None"
    return f"{type(value).__name__} {str(value)[:40]!r}"


def _number(value: Any) -> float | None:
    """A real number as float (numpy and 0-d tensors included), else None."""
    if isinstance(value, numbers.Real):
        return float(value)
    if getattr(value, "ndim", None) == 0 and hasattr(value, "item"):
        inner = value.item()
        return float(inner) if isinstance(inner, numbers.Real) else None
    return None


def check_output(who: str, out: Any, inputs: RewardInputs) -> StepRewards:
    """``out`` as plain ``StepRewards`` for every local agent and id of ``inputs.mine``, or one error line."""
    if not isinstance(out, tuple) or len(out) != 2:
        raise CorlError(f"{who} returned {_kind(out)}; expected StepRewards(rewards, labels)")
    rewards, labels = out
    return StepRewards(_check_rewards(who, rewards, inputs), _check_labels(who, labels, inputs))


def _check_rewards(who: str, rewards: Any, inputs: RewardInputs) -> Rewards:
    if not isinstance(rewards, Mapping):
        raise CorlError(
            f"{who}: rewards are {_kind(rewards)}; expected {{agent: {{problem id: [K numbers]}}}}"
        )
    out: Rewards = {}
    for name in inputs.local:
        groups = rewards.get(name)
        if not isinstance(groups, Mapping):
            missing = "has no entry" if groups is None else f"has {_kind(groups)}"
            raise CorlError(f"{who}: agent '{name}' {missing} in the rewards (problems {_ids(inputs.mine)})")
        out[name] = {}
        for pid in inputs.mine:
            out[name][pid] = _group(who, name, pid, groups.get(pid), len(inputs.completions[name][pid]))
    return out


def _group(who: str, name: str, pid: str, values: Any, k: int) -> list[float]:
    where = f"{who}: agent '{name}', problem {pid!r}"
    if values is None:
        raise CorlError(f"{where}: no rewards (expected {k}, one per completion)")
    if isinstance(values, str | bytes | Mapping) or not hasattr(values, "__len__"):
        raise CorlError(f"{where}: rewards are {_kind(values)}; expected a list of {k} numbers")
    if len(values) != k:
        raise CorlError(f"{where}: {len(values)} rewards for {k} completions")
    floats = []
    for j, value in enumerate(values):
        number = _number(value)
        if number is None:
            raise CorlError(f"{where}, completion {j}: reward is {_kind(value)}, not a number")
        if not math.isfinite(number):
            raise CorlError(f"{where}, completion {j}: reward is {number}; rewards must be finite")
        floats.append(number)
    return floats


def _check_labels(who: str, labels: Any, inputs: RewardInputs) -> Labels:
    if labels is None:
        return {}
    if not isinstance(labels, Mapping):
        raise CorlError(
            f"{who}: labels are {_kind(labels)}; expected {{agent: {{problem id: text or None}}}}"
        )
    out: Labels = {}
    for name in inputs.local:
        if name not in labels:
            continue  # a reward without labels for this agent (format, length, …)
        groups = labels[name]
        if not isinstance(groups, Mapping):
            raise CorlError(
                f"{who}: labels of agent '{name}' are {_kind(groups)}; expected {{problem id: text}}"
            )
        out[name] = {}
        for pid in inputs.mine:
            label = groups.get(pid)
            if label is not None and not isinstance(label, str):
                raise CorlError(
                    f"{who}: agent '{name}', problem {pid!r}: label is {_kind(label)}; expected text or None"
                )
            out[name][pid] = label
    return out
