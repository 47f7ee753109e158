"""Self-consistency of a benchmark's scorer: a response that states a record's own gold answer is correct.

For every record, responses are written in the forms real models use (the raw gold, ``\\boxed{gold}``, "The
answer is gold.", the benchmark's own prompt format, and for multiple choice the letter, the option text and
"X. option text"), then scored both ways. A form that an official rule rejects by design is listed in
:data:`OFFICIAL_EXCEPTIONS` (see docs/grading.md, "Self-consistency") and not counted as a failure.
``benchmarks/grading/self_consistency.py`` runs this on whole benchmarks; the tests run it on the fixtures.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from corl_vl.data.problem import Problem
from corl_vl.eval.scoring import get_scorer

#: (benchmark, form) pairs whose official verdict is "wrong" by the official script's own rule.
OFFICIAL_EXCEPTIONS: frozenset[tuple[str, str]] = frozenset(
    {
        # MathVision evaluate.py compares the option *text* only after a letter was not found; "X. text" keeps
        # the label glued to the text (docs/grading.md lists the lines)
        ("mathvision", "letter. option"),
    }
)


def forms(benchmark: str, problem: Problem, choices: Sequence[str] | None) -> dict[str, str]:
    """The responses that state ``problem``'s gold answer, by form name."""
    gold = (problem.answer or "").strip()
    out = {"raw": gold, "boxed": f"\\boxed{{{gold}}}", "sentence": f"The answer is {gold}."}
    if benchmark == "wemath":
        out["prompt"] = f"<Answer>: {gold}"
    if choices:
        from corl_vl.answers.options import letter_of, parse_options

        options = parse_options(choices)
        letter = letter_of(gold, options)
        index = options.letters.index(letter) if letter is not None else None
        if index is None:  # gold is an option's text (MathVista)
            lowered = [v.strip().lower() for v in options.values]
            index = lowered.index(gold.lower()) if gold.lower() in lowered else None
        if index is not None:
            letter, value = options.letters[index], options.values[index]
            out["letter"] = letter
            out["option"] = value
            out["letter. option"] = f"{letter}. {value}"
            out["(letter)"] = f"({letter})"
            out["prompt"] = out.get("prompt", f"The correct option is {letter}.")
    return out


@dataclass
class Consistency:
    """Per benchmark: forms tried and failed, per scoring mode, and the failing (id, form, response) rows."""

    benchmark: str
    tried: dict[str, int] = field(default_factory=dict)
    failed: dict[str, int] = field(default_factory=dict)
    excepted: int = 0
    failures: list[dict[str, str]] = field(default_factory=list)
    records: int = 0
    records_failed: dict[str, int] = field(default_factory=dict)

    def rate(self, mode: str) -> float:
        """Fraction of records all of whose forms are correct in ``mode``."""
        return 1.0 - self.records_failed.get(mode, 0) / self.records if self.records else 1.0


def check(benchmark: str, problems: Sequence[Problem]) -> Consistency:
    """Score every form of every record in both modes."""
    scorer = get_scorer(benchmark)
    result = Consistency(benchmark)
    for problem in problems:
        result.records += 1
        named = forms(benchmark, problem, scorer.choices(problem))
        scored = scorer.score_record(problem, list(named.values()))
        bad_modes: set[str] = set()
        for k, name in enumerate(named):
            for mode, verdicts in (
                ("official", scored.correct_official),
                ("verified", scored.correct_verified),
            ):
                result.tried[mode] = result.tried.get(mode, 0) + 1
                if verdicts is None or verdicts[k]:
                    continue
                if mode == "official" and (benchmark, name) in OFFICIAL_EXCEPTIONS:
                    result.excepted += 1
                    continue
                result.failed[mode] = result.failed.get(mode, 0) + 1
                bad_modes.add(mode)
                extracted = scored.extracted_official if mode == "official" else scored.extracted
                result.failures.append(
                    {"id": problem.id, "mode": mode, "form": name, "gold": problem.answer or "",
                     "response": named[name], "extracted": str((extracted or [None] * len(named))[k])}
                )  # fmt: skip
        for mode in bad_modes:
            result.records_failed[mode] = result.records_failed.get(mode, 0) + 1
    return result
