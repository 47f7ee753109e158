"""Older config layouts read in today's shape, one warning per moved key.

Why: the reward settings once lived under ``train`` (reward, peer_reward) and ``topology`` (who supervises
whom, ties, weighting), and experiment files had their own ``warm_start``/``cohort``/``heldout`` layout. Saved
runs and users' files in those layouts keep loading (and resuming) unchanged.
"""

from __future__ import annotations

import logging
from typing import Any

from corl_vl.errors import CorlError

# old key → its place in the reward section; old files and --set keys still load, with one warning each
MOVED_KEYS = {
    "train.reward": "reward.name",
    "train.peer_reward": "reward.peer_reward",
    "topology.kind": "reward.topology",
    **{
        f"topology.{k}": f"reward.{k}"
        for k in (
            "edges",
            "min_share",
            "ties",
            "weighting",
            "min_weight_share",
            "reliability_ema",
            "reliability_tag",
        )
    },
}
log = logging.getLogger("corl_vl.config")


def migrate(raw: dict[str, Any], source: str) -> dict[str, Any]:
    """Older layouts in today's shape, one warning per moved key: the experiment file's ``warm_start`` /
    ``cohort`` / ``heldout`` sections, and the reward settings once under ``train`` and ``topology``."""
    raw = dict(raw)
    if "cohort" in raw and "warm_start" in raw:
        unknown = sorted(set(raw) - {"cohort", "warm_start", "heldout"})
        if unknown:
            raise CorlError(f"{source}: unknown section '{unknown[0]}' beside warm_start/cohort/heldout")
        log.warning(
            "%s: the warm_start/cohort/heldout layout is deprecated; put the cohort's sections at the top "
            "level and warm_start/heldout under 'experiment:'",
            source,
        )
        cohort = raw["cohort"] or {}
        if not isinstance(cohort, dict):
            raise CorlError(f"cohort: expected a mapping (in {source})")
        raw = {**cohort, "experiment": {"warm_start": raw["warm_start"], "heldout": raw.get("heldout") or {}}}
    sections = {name: dict(raw[name]) for name in ("train", "topology") if isinstance(raw.get(name), dict)}
    if not any(k.split(".")[1] in sections.get(k.split(".")[0], {}) for k in MOVED_KEYS):
        return raw
    reward = dict(raw.get("reward") or {}) if isinstance(raw.get("reward", {}), dict) else raw["reward"]
    for old, new in MOVED_KEYS.items():
        section, key = old.split(".")
        if key not in sections.get(section, {}):
            continue
        value, target = sections[section].pop(key), new.split(".")[1]
        if target in reward and reward[target] != value:
            raise CorlError(f"{old} and {new} disagree ({value!r} vs {reward[target]!r}) (in {source})")
        reward[target] = value
        log.warning("%s: '%s' is deprecated; use '%s'", source, old, new)
    raw.update(sections)
    if not raw.get("topology"):
        raw.pop("topology", None)
    raw["reward"] = reward
    return raw
