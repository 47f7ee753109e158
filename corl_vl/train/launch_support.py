"""What each process layout supports: one table (:data:`FEATURES`), read by one check (:func:`check_support`).

Why one table: a feature that a multi-process launch cannot run used to be refused wherever it was first noticed
(the recipe, the cohort, a backend), each with its own line. Here each row says, per layout, whether a feature
runs and why not; the check refuses a config that uses a feature its layout does not run, before any model
loads. docs/scaling.md shows the same table (:func:`markdown`; tests/test_launch_support.py keeps them equal).

Layouts: one process (every agent in it), a torchrun launch without a DeepSpeed file (each agent alone on its
rank, the Torch backend), and a DeepSpeed launch at ZeRO stage 1, 2 or 3 (an agent's rank group shares it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from corl_vl.errors import CorlError

ONE, TORCHRUN = "one process", "torchrun"
LAYOUTS = (ONE, TORCHRUN, "ZeRO-1", "ZeRO-2", "ZeRO-3")
YES, NO, IGNORED, NA = "yes", "no", "ignored", "—"


@dataclass(frozen=True)
class Launch:
    """What the check needs of a launch: its layout and how many ranks each agent has."""

    layout: str
    group_size: int = 1


@dataclass(frozen=True)
class Feature:
    """One row: ``support`` per layout (``yes``, ``no``: refused, ``ignored``: off without a word, ``—``: does
    not arise), ``used(cfg, launch)`` whether a config uses it, ``refusal(cfg, launch)`` the error line."""

    name: str
    support: dict[str, str]
    why: str
    used: Callable[[Any, Launch], bool]
    refusal: Callable[[Any, Launch], str] = lambda cfg, launch: ""


def _launches(one: str, torchrun: str, zero: str) -> dict[str, str]:
    return {ONE: one, TORCHRUN: torchrun, "ZeRO-1": zero, "ZeRO-2": zero, "ZeRO-3": zero}


def _paired_views(cfg: Any, launch: Launch) -> bool:
    # lazy: numpy
    from corl_vl.rewards.combine import step_reward

    return step_reward(cfg.reward).paired_views


FEATURES: tuple[Feature, ...] = (
    Feature(
        "`distributed.deepspeed`",
        _launches(NO, NA, YES),
        "DeepSpeed shards an agent over its rank group; a single process has none",
        lambda cfg, launch: bool(cfg.distributed.deepspeed),
        lambda cfg, launch: (
            "distributed.deepspeed is set but this is a single process; launch with torchrun / accelerate launch "
            "(one process group per agent), or drop the setting"
        ),
    ),
    Feature(
        "`data.max_prompt_tokens`",
        _launches(YES, NO, NO),
        "a problem too long for any agent is dropped for all; a rank sees only its own agent's prompts",
        lambda cfg, launch: cfg.data.max_prompt_tokens is not None,
        lambda cfg, launch: "data.max_prompt_tokens runs in one process; drop torchrun or the bound",
    ),
    Feature(
        "an agent on several ranks (`agents[i].gpus` > 1)",
        _launches(NA, NO, YES),
        "the Torch backend holds an agent's whole weights in its one process; sharding them is DeepSpeed's",
        lambda cfg, launch: launch.group_size > 1,
        lambda cfg, launch: (
            f"distributed.deepspeed: an agent on {launch.group_size} ranks needs a DeepSpeed config "
            "(e.g. --set distributed.deepspeed=configs/deepspeed/zero2.json)"
        ),
    ),
    Feature(
        "`data.problems_per_step` below an agent's ranks",
        _launches(NA, NA, NO),
        "each rank of an agent rolls out its own share of the step's problems; a rank with none has no batch",
        lambda cfg, launch: cfg.data.problems_per_step < launch.group_size,
        lambda cfg, launch: (
            f"data.problems_per_step={cfg.data.problems_per_step} is below the {launch.group_size} ranks per agent"
        ),
    ),
    Feature(
        "a reward with paired views (`reward.name: co_rewarding_i`)",
        _launches(YES, NO, NO),
        "the original and rephrased twin groups are drawn and labelled together in one process",
        _paired_views,
        lambda cfg, launch: f"reward.name={cfg.reward.name} runs in one process; drop torchrun",
    ),
    Feature(
        "`optimizer.offload: cpu`",
        _launches(YES, YES, YES),
        "the Torch backend's host-memory AdamW state, or DeepSpeed's `offload_optimizer` (the same placement)",
        lambda cfg, launch: cfg.optimizer.offload != "none",
    ),
    Feature(
        "`train.parallel_agents`",
        _launches(YES, IGNORED, IGNORED),
        "threads over the agents of one process; a launch's process holds one agent",
        lambda cfg, launch: bool(cfg.train.parallel_agents),
    ),
)


def launch_of(cfg: Any, dist: Any, zero_stage: int | None = None) -> Launch:
    """The layout of this run: one process (``dist`` None), a launch without a DeepSpeed file, or ZeRO-k
    (``zero_stage``: the DeepSpeed file's, with ``distributed.zero_stage`` applied)."""
    if dist is None:
        return Launch(ONE)
    if not cfg.distributed.deepspeed:
        return Launch(TORCHRUN, dist.group_size)
    if zero_stage not in (1, 2, 3):
        raise ValueError(f"a DeepSpeed launch needs its ZeRO stage (1, 2 or 3), got {zero_stage}")
    return Launch(f"ZeRO-{zero_stage}", dist.group_size)


def check_support(cfg: Any, launch: Launch) -> None:
    """Refuse the first feature ``cfg`` uses that ``launch``'s layout does not run (its row's line)."""
    for feature in FEATURES:
        if feature.support[launch.layout] == NO and feature.used(cfg, launch):
            raise CorlError(feature.refusal(cfg, launch))


def markdown() -> str:
    """The table as docs/scaling.md shows it."""
    lines = [
        "| feature | " + " | ".join(LAYOUTS) + " | why |",
        "|---" * (len(LAYOUTS) + 2) + "|",
    ]
    for f in FEATURES:
        lines.append(f"| {f.name} | " + " | ".join(f.support[k] for k in LAYOUTS) + f" | {f.why} |")
    return "\n".join(lines) + "\n"
