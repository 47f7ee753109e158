"""The combination sweep's plan: the interacting options, their values, and a pairwise covering array over them.

Why pairwise: options that train alone broke only together (issue 45), and most such faults need two options
(a 7-vs-8 size mismatch from micro-batch 3 with a dropped truncated row, an offloaded optimizer under torchrun).
Every pair of values of two options appears in at least one row; a small greedy (:func:`covering_array`) builds
the rows deterministically, so the committed table and the test see the same rows. Pairs no run can hold (a
2-agent topology in the 3-agent cohort) are excluded by :func:`allowed`; pairs of the launch with options that
do not touch what a launch changes (sharding, ranks, checkpoint files) are not required (:func:`required`),
which keeps the torchrun rows (three runs each: straight, 1 step, resume) few.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from sweep_catalog import TINY

# the demo cohort at a smoke budget (sweep_catalog.TINY), with a constant schedule: a 1-step run and a 2-step run
# then follow the same learning rate, so "1 step + resume" can equal "2 straight steps"
BASE = [*TINY, "train.scheduler=constant", "train.warmup_ratio=0"]
# a third, text-only agent (Qwen2.5) beside the demo's two VLMs: strong on every skill from a short warm start
MIXED3 = [
    "agents=[{name: qwen, model: tiny-qwen2.5-vl}, {name: internvl, model: tiny-internvl3.5},"
    " {name: text, model: tiny-qwen2.5}]",
    "experiment.warm_start.skill_sets=[[figure_color], [ground_color], []]",
    "experiment.agents={text: {labels_per_skill: 128, steps: 60}}",
]
SAVE_LIMIT = ["train.max_steps=2", "train.save_every=1", "train.save_total_limit=1"]


@dataclass(frozen=True)
class Level:
    """One value of a factor: its short label in the table and the ``--set`` overrides that make it."""

    label: str
    sets: tuple[str, ...] = ()


def _lv(label: str, *sets: str) -> Level:
    return Level(label, sets)


FACTORS: dict[str, list[Level]] = {
    "launch": [_lv("single"), _lv("zero2"), _lv("zero3")],
    "engine": [_lv("hf", "rollout.engine=hf"), _lv("vllm", "rollout.engine=vllm")],
    "cohort": [_lv("demo2"), _lv("mixed3", *MIXED3)],
    "lora": [_lv("none"), _lv("qwen", "agents.qwen.lora={}")],
    "freeze": [
        _lv("none"),
        _lv("vision_tower", "train.freeze=[vision_tower]"),
        _lv("lm_head", "train.freeze=[lm_head]"),
    ],
    "offload": [_lv("none"), _lv("cpu", "optimizer.offload=cpu")],
    "updates": [_lv("1"), _lv("2", "grpo.updates_per_batch=2")],
    "dynamic": [_lv("off"), _lv("2", "grpo.dynamic_sampling=2")],
    "votes": [_lv("=k"), _lv("8>k", "grpo.votes=8")],
    "truncated": [_lv(v, f"grpo.truncated={v}") for v in ("keep", "mask", "drop")],
    "loss": [_lv(v, f"grpo.loss_type={v}") for v in ("bnpo", "grpo", "dr_grpo")],
    "advantage": [_lv(v, f"grpo.advantage={v}") for v in ("grpo", "dr_grpo")],
    "weighting": [_lv(v, f"reward.weighting={v}") for v in ("uniform", "agreement", "dawid_skene")],
    "peer_reward": [_lv(v, f"reward.peer_reward={v}") for v in ("hard", "soft")],
    "topology": [_lv(v, f"reward.topology={v}") for v in ("mutual", "ring", "all_peers")],
    "micro_batch": [_lv("16"), _lv("3", "grpo.micro_batch_size=3")],
    "pixels": [_lv("default"), _lv("3136", "data.max_pixels=3136")],
    "completion_log": [_lv("0"), _lv("2", "train.log_completions=2")],
    "save_limit": [_lv("none"), _lv("1", *SAVE_LIMIT)],
}
# what a launch changes (sharded optimizer state, ranks, DeepSpeed checkpoint files) meets these options (votes,
# micro-batches, losses act inside one agent, the same code on its rank; they are paired with the launch by chance)
LAUNCH_INTERACTS = {"lora", "offload", "updates", "dynamic", "save_limit"}
# frozen parts under ZeRO: the vision tower under stage 2, the output head under stage 3 (issue 46 names it)
LAUNCH_FREEZE = {("zero2", "vision_tower"), ("zero3", "lm_head")}

Row = dict[str, str]


def allowed(row: Row) -> bool:
    """Whether a (partial) row can be one run: torchrun runs one 2-agent cohort on HF rollouts (a process per
    agent; vLLM engines under torchrun would cost minutes each here), vLLM runs the 2-agent cohort (three vLLM
    engines at once do not fit this shared CPU's time), and mutual supervision needs exactly two agents."""
    launch, engine, cohort = row.get("launch"), row.get("engine"), row.get("cohort")
    if launch not in (None, "single") and (engine == "vllm" or cohort == "mixed3"):
        return False
    if engine == "vllm" and cohort == "mixed3":
        return False
    return not (cohort == "mixed3" and row.get("topology") == "mutual")


def required(a: str, va: str, b: str, vb: str) -> bool:
    """Whether the pair (a=va, b=vb) must appear in some row (a before b in FACTORS' order)."""
    if not allowed({a: va, b: vb}):
        return False
    if a == "launch" and va != "single":
        return b in LAUNCH_INTERACTS or (b == "freeze" and (va, vb) in LAUNCH_FREEZE)
    return True


def all_pairs() -> set[tuple[str, str, str, str]]:
    names = list(FACTORS)
    return {
        (a, x.label, b, y.label)
        for a, b in itertools.combinations(names, 2)
        for x in FACTORS[a]
        for y in FACTORS[b]
        if required(a, x.label, b, y.label)
    }


def _pairs_of(row: Row) -> set[tuple[str, str, str, str]]:
    names = [n for n in FACTORS if n in row]
    return {(a, row[a], b, row[b]) for a, b in itertools.combinations(names, 2)}


def _gain(row: Row, name: str, label: str, left: set[tuple[str, str, str, str]]) -> int:
    names = list(FACTORS)
    pairs = (
        (o, row[o], name, label) if names.index(o) < names.index(name) else (name, label, o, row[o])
        for o in row
    )
    return sum(p in left for p in pairs)


def _grow(seed: tuple[str, str, str, str], left: set[tuple[str, str, str, str]]) -> Row:
    """A row from one uncovered pair: every other factor gets the allowed value that covers the most
    uncovered pairs with the values already set (ties: the first value)."""
    a, va, b, vb = seed
    row: Row = {a: va, b: vb}
    for name in FACTORS:
        if name in row:
            continue
        choices = [lv.label for lv in FACTORS[name] if allowed({**row, name: lv.label})]
        assert choices, f"no allowed value of {name} for {row}"
        row[name] = max(choices, key=lambda label: (_gain(row, name, label, left), -choices.index(label)))
    return {n: row[n] for n in FACTORS}


def covering_array() -> list[Row]:
    """Rows covering every required pair (AETG-style greedy): each row is grown from every uncovered pair in
    turn and the one covering the most uncovered pairs is kept (ties: the earliest seed). Deterministic."""
    left = all_pairs()
    rows: list[Row] = []
    while left:
        grown = (_grow(seed, left) for seed in sorted(left))
        best = max(grown, key=lambda r: len(_pairs_of(r) & left))  # max keeps the first of equals
        left -= _pairs_of(best)
        rows.append(best)
    # the slow rows last: single-process HF rows report first, then torchrun, then vLLM (start-up: minutes)
    return sorted(rows, key=lambda r: (r["engine"] == "vllm", r["launch"] != "single"))


def overrides(row: Row) -> list[str]:
    """The row's ``--set`` list: the base, then each factor's settings."""
    sets = list(BASE)
    for name, label in row.items():
        level = next(lv for lv in FACTORS[name] if lv.label == label)
        sets += level.sets
    return sets


def row_id(index: int, row: Row) -> str:
    shown = [f"{n}={v}" for n, v in row.items() if v != FACTORS[n][0].label or n == "launch"]
    return f"r{index:02d} " + " ".join(shown)


# rows aimed at one claim each, beside the covering array: refusals the config decides, and ZeRO-1
TARGETED: list[tuple[str, list[str], str]] = [
    (
        "x01 freeze every part",
        ["train.freeze=[vision_tower, projector, language_model, lm_head]"],
        "refused",
    ),
    (
        "x02 LoRA with the language model frozen",
        ["agents.qwen.lora={}", "train.freeze=[language_model]"],
        "refused",
    ),
    ("x03 zero1 + resume", ["distributed.zero_stage=1"], "zero1"),
]
