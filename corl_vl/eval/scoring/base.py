"""What every benchmark scorer shares: extract → judge per response, accuracy, breakdowns, results dict.

Why split extraction from judging: an ensemble votes over *extracted* answers and then judges the winning
label once, so both steps must be callable on their own. A record may have several responses (AMC avg@8):
its score is the mean of their verdicts. A record with no response counts as wrong and is listed as missing.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from corl_vl.data.problem import Problem


@dataclass
class RecordScore:
    """The verdicts for one record.

    Attributes:
        id: the problem id.
        responses: the responses scored (pooled responses for an ensemble).
        extracted: the answer extracted from each response (None: no answer found).
        correct: one verdict per response; for an ensemble one verdict for the voted label.
        vote: the ensemble's majority label (None without an ensemble, or when the vote gave no label).
        vote_share: fraction of the pooled votes the label got.
    """

    id: str
    responses: list[str]
    extracted: list[str | None]
    correct: list[bool]
    vote: str | None = None
    vote_share: float | None = None
    ensemble: bool = False

    @property
    def missing(self) -> bool:
        return not self.responses

    @property
    def score(self) -> float:
        """Mean verdict (avg@k); 0 for a record without responses."""
        return sum(self.correct) / len(self.correct) if self.correct else 0.0

    def to_json(self) -> dict[str, Any]:
        """One line of responses.jsonl: singular keys for one response, lists for several."""
        out: dict[str, Any] = {"id": self.id}
        if self.missing:
            out.update(response=None, extracted=None, correct=False)
        elif self.ensemble:
            out.update(responses=self.responses, extracted=self.extracted, vote=self.vote,
                       vote_share=self.vote_share, correct=bool(self.correct and self.correct[0]))  # fmt: skip
        elif len(self.responses) == 1:
            out.update(response=self.responses[0], extracted=self.extracted[0], correct=self.correct[0])
        else:
            out.update(
                responses=self.responses, extracted=self.extracted, correct=self.correct, score=self.score
            )
        out["missing"] = self.missing
        return out


def accuracy_entry(scores: Sequence[float]) -> dict[str, Any]:
    """``{"accuracy", "correct", "total"}`` as the official MathVista score files write them (fractions)."""
    correct = sum(scores)
    correct_out: float | int = int(correct) if float(correct).is_integer() else round(correct, 6)
    return {
        "accuracy": correct / len(scores) if scores else 0.0,
        "correct": correct_out,
        "total": len(scores),
    }


def letter_gold_equivalent(gold: str, extracted: str, choices: Sequence[str]) -> bool:
    """Judge against a gold that is an option *letter* (We-Math, MathVerse, MathVision, GPQA).

    A lone letter in the answer is read as a letter even when some option's value is itself a letter (real
    We-Math rows have options "F; D; B; I; No correct answer"), as the benchmarks' own scripts read it; any
    other answer is compared with the gold option's value.
    """
    from corl_vl.answers import equivalent
    from corl_vl.answers.options import letter_of, parse_options

    options = parse_options(choices)
    index = options.index_of_letter(gold.strip()) if len(gold.strip()) == 1 else None
    if index is None:  # gold is not a letter of these options: compare freely
        return bool(equivalent(gold, extracted, choices))
    letter = letter_of(extracted, options)
    if letter is not None:
        return options.letters.index(letter) == index
    return bool(equivalent(options.values[index], extracted, choices))


@dataclass
class Scorer:
    """Base scorer: extraction with the shared extractor, judging with the shared equivalence check.

    Subclasses override :meth:`extract`/:meth:`judge` for a benchmark's own normalisation, :meth:`groups` for
    its breakdown keys and :meth:`extra_metrics` for metrics beyond accuracy.
    """

    name: str = "generic"
    breakdown_keys: tuple[str, ...] = field(default_factory=tuple)

    def choices(self, problem: Problem) -> list[str] | None:
        """Option texts used for extraction and judging (MathVerse keeps them in ``meta``)."""
        return problem.choices or problem.meta.get("choices") or None

    def extract(self, problem: Problem, response: str) -> str | None:
        from corl_vl.answers import extract_answer

        return extract_answer(response, self.choices(problem))

    def judge(self, problem: Problem, extracted: str | None) -> bool:
        from corl_vl.answers import equivalent

        if extracted is None or problem.answer is None:
            return False
        choices = self.choices(problem)
        if choices:
            return letter_gold_equivalent(problem.answer, extracted, choices)
        return bool(equivalent(problem.answer, extracted))

    def score_record(self, problem: Problem, responses: Sequence[str]) -> RecordScore:
        extracted = [self.extract(problem, r) for r in responses]
        correct = [self.judge(problem, e) for e in extracted]
        return RecordScore(problem.id, list(responses), extracted, correct)

    def groups(self, problem: Problem) -> dict[str, Any]:
        """The record's value for each breakdown key (a list value puts it in several groups, e.g. skills)."""
        return {key: problem.meta.get(key, "unknown") for key in self.breakdown_keys}

    def breakdowns(self, problems: Sequence[Problem], records: Mapping[str, RecordScore]) -> dict[str, Any]:
        table: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
        for problem in problems:
            score = records[problem.id].score
            for key, value in self.groups(problem).items():
                for v in value if isinstance(value, list | tuple) else [value]:
                    table[key][str(v)].append(score)
        return {
            key: {value: accuracy_entry(scores) for value, scores in sorted(table[key].items())}
            for key in self.breakdown_keys
            if key in table and set(table[key]) != {"unknown"}  # a key the source does not carry
        }

    def extra_metrics(
        self, problems: Sequence[Problem], records: Mapping[str, RecordScore]
    ) -> tuple[dict[str, float], dict[str, Any]]:
        """Benchmark-specific (metrics, breakdowns) merged into the results; none by default."""
        return {}, {}

    def overall(self, metrics: Mapping[str, float]) -> float:
        """The headline number (accuracy unless the benchmark defines another)."""
        return metrics["accuracy"]

    def results(self, problems: Sequence[Problem], records: Mapping[str, RecordScore]) -> dict[str, Any]:
        """``{"benchmark", "overall", "metrics", "breakdowns", ...}`` with accuracies as fractions."""
        scores = [records[p.id].score for p in problems]
        metrics: dict[str, float] = {"accuracy": accuracy_entry(scores)["accuracy"]}
        extra_metrics, extra_breakdowns = self.extra_metrics(problems, records)
        metrics.update(extra_metrics)
        breakdowns = self.breakdowns(problems, records)
        breakdowns.update(extra_breakdowns)
        missing = [p.id for p in problems if records[p.id].missing]
        n_resp = [len(records[p.id].responses) for p in problems if not records[p.id].missing]
        return {
            "benchmark": self.name,
            "overall": self.overall(metrics),
            "metrics": metrics,
            "breakdowns": breakdowns,
            "n_records": len(problems),
            "n_correct": accuracy_entry(scores)["correct"],
            "responses_per_record": max(n_resp, default=0),
            "n_missing": len(missing),
            "missing_ids": missing,
        }
