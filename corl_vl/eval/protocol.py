"""Evaluation protocols: a paper's evaluation settings under one name (``corl-vl eval --protocol co-rl``).

Why: reproducing a table means fixing the decoding, the token budgets, the image size, the sample counts, the
benchmark splits, the prompt format and the grader together; assembled by hand, one is easily missed and
nothing records which split or grader produced a number. A protocol fixes them all, refuses a flag that would
change one, and its record (every setting with its source) goes into ``results.json`` and ``report.md``.

``co-rl`` is the Co-RL paper's App. D.5 (docs/evaluation.md, "The paper's protocol", says what each setting
is, where it comes from, and what was chosen where the paper leaves a detail open).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from corl_vl.errors import CorlError
from corl_vl.eval.benchmarks import get_spec

PAPER = "Co-RL paper, App. D.5 (Evaluation Details)"


@dataclass(frozen=True)
class Setting:
    """One fixed setting: its value and where the value comes from."""

    value: Any
    source: str


@dataclass(frozen=True)
class Protocol:
    """A named set of evaluation settings (see :data:`PROTOCOLS`).

    ``flags`` are the ``corl-vl eval`` options the protocol fixes (a user value for one is refused);
    ``settings`` everything it fixes, recorded with its source; ``splits`` the benchmark splits.
    """

    name: str
    benchmarks: tuple[str, ...]
    flags: Mapping[str, Any]
    splits: Mapping[str, str]
    settings: Mapping[str, Setting] = field(default_factory=dict)

    def record(self) -> dict[str, Any]:
        """The JSON record of the protocol (``results.json`` ``protocol``)."""
        return {
            "name": self.name,
            "settings": {k: {"value": s.value, "source": s.source} for k, s in self.settings.items()},
        }


_OPEN = 'not stated in the paper; chosen here (docs/evaluation.md, "The paper\'s protocol")'
CO_RL = Protocol(
    name="co-rl",
    benchmarks=("mathvision", "mathverse", "mathvista", "wemath"),
    flags={
        "temperature": None,
        "top_p": None,
        "max_new_tokens": None,
        "samples": None,
        "max_long_side": 1024,
        "answer_format": None,
        "split": None,
        "scoring": "verified",
        "extraction": "lenient",
        "extractor": "rules",
        "ensemble": None,
    },
    splits={
        "mathvision": "testmini",
        "mathverse": "testmini",
        "mathvista": "testmini",
        "wemath": "testmini",
        "math500": "test",
        "amc": "train",
        "aime": "train",
        "gpqa": "train",
        "gsm8k": "test",
    },
    settings={
        "vision decoding": Setting("greedy (temperature 0), one response per record", PAPER),
        "vision max_new_tokens": Setting(16384, PAPER),
        "image max long side (px)": Setting(1024, f"{PAPER}; bicubic, aspect kept (the public release)"),
        "text decoding": Setting("temperature 0.6, top-p 0.95", PAPER),
        "text max_new_tokens": Setting(3072, PAPER),
        "text samples": Setting("AMC 8 (avg@8), every other benchmark 1", PAPER),
        "vision benchmarks": Setting(
            "MathVision, MathVerse, MathVista, We-Math (the default --benchmark)",
            f"{PAPER}: MM-UPT's evaluation sets",
        ),
        "splits": Setting(
            "testmini for the four vision benchmarks; each text benchmark's own evaluation split",
            f"{PAPER} names MM-UPT's evaluation sets, not their splits; {_OPEN}",
        ),
        "prompt format": Setting("the checkpoint's training format (its prompt record)", PAPER),
        "grader": Setting(
            "verified: lenient extraction + math equivalence; the gold letter or the gold option's value; "
            "each benchmark's official score written beside it (overall_official)",
            f"{PAPER}: rule-based graders with math-aware normalisation that accept option letters and values",
        ),
        "small models": Setting(
            "under 20 M parameters (tiny test and demo models): at most 64 new tokens",
            "corl-vl (a random tiny model never stops; real models are unaffected)",
        ),
    },
)

PROTOCOLS: dict[str, Protocol] = {CO_RL.name: CO_RL}


def get_protocol(name: str) -> Protocol:
    """The protocol called ``name``; an unknown name is one error listing the known ones."""
    try:
        return PROTOCOLS[name]
    except KeyError:
        raise CorlError(f"unknown --protocol {name!r}; known: {', '.join(PROTOCOLS)}") from None


def apply_protocol(protocol: Protocol, options: Any, given: Sequence[str]) -> None:
    """Set ``options`` (the parsed ``corl-vl eval`` flags) to the protocol's values.

    ``given``: the flags the user set (their attribute names); one the protocol fixes is refused, since it
    would silently change the protocol. Without ``--benchmark`` the protocol's benchmarks are evaluated.
    """
    fixed = [dest for dest in given if dest in protocol.flags]
    if fixed:
        flag = "--" + fixed[0].replace("_", "-")
        raise CorlError(
            f'--protocol {protocol.name} fixes {flag} (docs/evaluation.md, "The paper\'s protocol"); drop {flag}, '
            "or drop --protocol to choose every setting yourself"
        )
    for dest, value in protocol.flags.items():
        setattr(options, dest, value)
    if not getattr(options, "benchmark", None):
        options.benchmark = [",".join(protocol.benchmarks)]


def split_for(protocol: Protocol | None, benchmark: str, data: Any, split: str | None) -> str | None:
    """The split to load: the protocol's for a hub load; with ``--data`` the given files are the split."""
    if protocol is None or data is not None:
        return split
    return protocol.splits.get(benchmark, split)


def describe_split(benchmark: str, data: Any, split: str | None, n_records: int) -> dict[str, Any]:
    """``results.json`` ``split``: its name (or the local source it came from) and how many records."""
    spec = get_spec(benchmark)
    if data is None:
        name = split or spec.splits[0]
        return {"name": name, "source": f"hub:{spec.hub_id}", "records": n_records}
    return {"name": split or "(the local file)", "source": str(data), "records": n_records}


def protocol_markdown(record: Mapping[str, Any], splits: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """report.md's protocol section: every setting with its source, then the split of each benchmark."""
    lines = ["", f"## Protocol: {record['name']}", "", "| setting | value | source |", "|---|---|---|"]
    for key, entry in record["settings"].items():
        lines.append(f"| {key} | {entry['value']} | {entry['source']} |")
    lines += ["", "| benchmark | split | source | records |", "|---|---|---|---:|"]
    for bench, split in splits.items():
        lines.append(f"| {bench} | {split['name']} | {split['source']} | {split['records']} |")
    return lines
