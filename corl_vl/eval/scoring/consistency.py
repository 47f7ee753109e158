"""Self-consistency of a benchmark's scorer: a response that states a record's own gold answer is correct.

For every record, responses are written in the forms real models use (the raw gold, ``\\boxed{gold}``, "The
answer is gold.", the benchmark's own prompt format, and for multiple choice the letter, the option text and
"X. option text"), then scored both ways. A form that an official rule rejects by design is listed in
:data:`EXCEPTIONS` (see docs/grading.md, "Self-consistency") and not counted as a failure.
``benchmarks/grading/self_consistency.py`` runs this on whole benchmarks; the tests run it on the fixtures.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from corl_vl.answers.options import letter_of, parse_options
from corl_vl.data.problem import Problem
from corl_vl.eval.scoring import get_scorer
from corl_vl.eval.scoring.mathvision_official import official_extract

Choices = Sequence[str] | None


def _always(_gold: str, _value: str | None, _choices: Choices) -> bool:
    return True


def _mathvision_cleaned(_gold: str, value: str | None, _choices: Choices) -> bool:
    """MATH-V compares its cleaned, lower-cased extraction with the *raw* option text, so an option text that
    its own cleaner changes (spaces, ``$``, LaTeX, capitals) never matches."""
    return value is not None and official_extract(value) != value.strip()


def _letter_shaped_gold(gold: str, _value: str | None, _choices: Choices) -> bool:
    """MathVista's calculate_score.py reads "(b)" as option letter B, even when "(b)" is an option's text."""
    return len(gold) == 3 and gold[0] == "(" and gold[2] == ")" and gold[1].isalpha()


def _letter_valued_option(_gold: str, value: str | None, _choices: Choices) -> bool:
    """An option whose text is itself a letter ("F; D; B; I"): a lone letter is read as a letter, as the
    benchmarks' own scripts read it, so the option text alone names another option."""
    return value is not None and len(value.strip()) == 1 and value.strip().isalpha()


#: (benchmark, mode, form) → when the form is rejected by design (docs/grading.md, "Self-consistency").
EXCEPTIONS: dict[tuple[str, str, str], Callable[[str, str | None, Choices], bool]] = {
    **{
        (b, m, "option"): _letter_valued_option
        for b in ("wemath", "mathverse", "mathvision")
        for m in ("official", "verified")
    },
    # We-Math's official letter is the first character after the last "Answer" (case-sensitive), else none
    **{("wemath", "official", form): _always for form in ("boxed", "sentence", "(letter)", "option")},
    ("mathvision", "official", "option"): _mathvision_cleaned,
    ("mathvision", "official", "letter. option"): _always,
    **{
        ("mathvista", "official", form): _letter_shaped_gold
        for form in ("raw", "boxed", "sentence", "option")
    },
}


def forms(benchmark: str, problem: Problem, choices: Sequence[str] | None) -> dict[str, str]:
    """The responses that state ``problem``'s gold answer, by form name."""
    gold = (problem.answer or "").strip()
    out = {"raw": gold, "boxed": f"\\boxed{{{gold}}}", "sentence": f"The answer is {gold}."}
    if benchmark == "wemath":
        out["prompt"] = f"<Answer>: {gold}"
    if choices:
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
        choices = scorer.choices(problem)
        named = forms(benchmark, problem, choices)
        scored = scorer.score_record(problem, list(named.values()))
        value = named.get("option")
        bad_modes: set[str] = set()
        for k, name in enumerate(named):
            for mode, verdicts in (
                ("official", scored.correct_official),
                ("verified", scored.correct_verified),
            ):
                result.tried[mode] = result.tried.get(mode, 0) + 1
                if verdicts is None or verdicts[k]:
                    continue
                rule = EXCEPTIONS.get((benchmark, mode, name))
                if rule is not None and rule(problem.answer or "", value, choices):
                    result.excepted += 1
                    continue
                result.failed[mode] = result.failed.get(mode, 0) + 1
                bad_modes.add(mode)
                extracted = scored.extracted_official if mode == "official" else scored.extracted
                result.failures.append(
                    {
                        "id": problem.id,
                        "mode": mode,
                        "form": name,
                        "gold": problem.answer or "",
                        "response": named[name],
                        "extracted": str((extracted or [None] * len(named))[k]),
                    }
                )
        for mode in bad_modes:
            result.records_failed[mode] = result.records_failed.get(mode, 0) + 1
    return result
