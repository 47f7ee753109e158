"""What every benchmark scorer shares: extract → judge per response, in two scoring modes, and the results dict.

Two verdicts per response: ``official`` (the benchmark's own published rules, so numbers compare with published
tables) and ``verified`` (lenient or strict extraction, then mathematical equivalence). ``scoring`` picks the
headline (``overall``, ``correct``, metrics, breakdowns); both overalls are always reported.
Why split extraction from judging: an ensemble votes over *extracted* answers and then judges the winning
label once, so both steps must be callable on their own. A record may have several responses (AMC avg@8):
its score is the mean of their verdicts. A record with no response counts as wrong and is listed as missing.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from corl_vl.answers import equivalent, extract_answer
from corl_vl.answers.extract import EXTRACTION_MODES, strip_dollars
from corl_vl.answers.normalize import canonical
from corl_vl.answers.options import letter_of, parse_options
from corl_vl.data.problem import Problem
from corl_vl.errors import CorlError

SCORING_MODES: tuple[str, ...] = ("official", "verified", "quick-match")
# ``quick-match`` is official scoring with MathVerse's ``--quick_match`` rule in place of its judge (every other
# benchmark has one official rule, so there it is ``official``).


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
        extracted_official / correct_official / correct_verified: the answers the official rules extracted
            and both verdicts per response (``correct`` is one of the two, chosen by the scorer's ``scoring``).
    """

    id: str
    responses: list[str]
    extracted: list[str | None]
    correct: list[bool]
    vote: str | None = None
    vote_share: float | None = None
    ensemble: bool = False
    extracted_official: list[str | None] | None = None
    correct_official: list[bool] | None = None
    correct_verified: list[bool] | None = None

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
            out.update(
                responses=self.responses,
                extracted=self.extracted,
                vote=self.vote,
                vote_share=self.vote_share,
                correct=bool(self.correct and self.correct[0]),
            )
        elif len(self.responses) == 1:
            out.update(response=self.responses[0], extracted=self.extracted[0], correct=self.correct[0])
        else:
            out.update(
                responses=self.responses, extracted=self.extracted, correct=self.correct, score=self.score
            )
        if not self.missing:
            single = len(self.correct) == 1
            for key in ("extracted_official", "correct_official", "correct_verified"):
                value = getattr(self, key)
                if value is not None:
                    out[key] = value[0] if single and len(value) == 1 else value
        else:
            out.update(correct_official=False, correct_verified=False)
        out["missing"] = self.missing
        return out

    def with_verdicts(self, which: str) -> RecordScore:
        """A copy whose ``correct`` is the ``official`` or ``verified`` verdicts (for the other overall)."""
        verdicts = self.correct_official if which == "official" else self.correct_verified
        return replace(self, correct=list(self.correct if verdicts is None else verdicts))


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
    options = parse_options(choices)
    index = options.index_of_letter(gold.strip()) if len(gold.strip()) == 1 else None
    if index is None:  # gold is not a letter of these options: compare freely
        return bool(equivalent(gold, extracted, choices))
    letter = letter_of(extracted, options)
    if letter is not None:
        return options.letters.index(letter) == index
    return bool(equivalent(options.values[index], extracted, choices))


def states_gold(response: str, gold: str | None) -> bool:
    """Whether the whole response is the gold answer, spelled the same up to ``$``, spacing and a final full
    stop ("domain: [-4, 0) and range: (-3, 1]" is correct even though no rule extracts a single value)."""
    if gold is None or not gold.strip() or len(response) > 2 * len(gold) + 20:
        return False
    return canonical(strip_dollars(response)) == canonical(strip_dollars(gold))


def disagreement_category(record: RecordScore) -> str:
    """Why a record's two verdicts differ, from its first response whose verdicts differ: which scoring
    accepts it, and whether the two extractions differ (a rule reads the response differently) or are the
    same (the comparison rules differ, e.g. exact string match against mathematical equivalence)."""
    official = record.correct_official or []
    verified = record.correct_verified or []
    extracted_official = record.extracted_official or [None] * len(official)
    for j, (o, v) in enumerate(zip(official, verified)):
        if o == v:
            continue
        side = "official accepts" if o else "verified accepts"
        eo, ev = extracted_official[j], record.extracted[j] if j < len(record.extracted) else None
        if eo is None or ev is None:
            reason = "no official extraction" if eo is None else "no verified extraction"
        elif eo.strip() == ev.strip():
            reason = "same extraction, different comparison"
        else:
            reason = "different extraction"
        return f"{side}: {reason}"
    return "mean of several responses"


@dataclass
class Scorer:
    """Base scorer: ``verified`` = the shared extractor (``extraction`` mode) + the shared equivalence check;
    ``official`` = the benchmark's published rules (by default: strict extraction + the same equivalence, which
    is what boxed-answer text benchmarks use).

    Subclasses override :meth:`official_extract`/:meth:`official_judge` with a benchmark's own rules,
    :meth:`judge` for its verified comparison, :meth:`groups` for its breakdown keys and :meth:`extra_metrics`
    for metrics beyond accuracy. ``official_extractions`` (record id → one extraction per response, e.g. from
    a model extractor) replace the rule-based official extraction when given.
    """

    name: str = "generic"
    breakdown_keys: tuple[str, ...] = field(default_factory=tuple)
    scoring: str = "official"
    extraction: str = "lenient"
    official_extractions: Mapping[str, Sequence[str | None]] | None = None

    def __post_init__(self) -> None:
        if self.scoring not in SCORING_MODES:
            raise CorlError(f"unknown scoring {self.scoring!r}; choose from {list(SCORING_MODES)}")
        if self.extraction not in EXTRACTION_MODES:
            raise CorlError(f"unknown extraction {self.extraction!r}; choose from {list(EXTRACTION_MODES)}")

    def choices(self, problem: Problem) -> list[str] | None:
        """Option texts used for extraction and judging (MathVerse keeps them in ``meta``)."""
        return problem.choices or problem.meta.get("choices") or None

    def extract(self, problem: Problem, response: str) -> str | None:
        """The verified-mode extraction (``extraction``: lenient or strict)."""
        return extract_answer(response, self.choices(problem), mode=self.extraction)

    def official_extract(self, problem: Problem, response: str) -> str | None:
        """The official rules' extraction; default: strict markers (``\\boxed{}`` first)."""
        return extract_answer(response, self.choices(problem), mode="strict")

    def official_judge(self, problem: Problem, extracted: str | None) -> bool:
        """The official rules' verdict on an extraction; default: the verified comparison."""
        return self.judge(problem, extracted)

    def judge(self, problem: Problem, extracted: str | None) -> bool:
        if extracted is None or problem.answer is None:
            return False
        choices = self.choices(problem)
        if choices:
            return letter_gold_equivalent(problem.answer, extracted, choices)
        return bool(equivalent(problem.answer, extracted))

    def score_record(self, problem: Problem, responses: Sequence[str]) -> RecordScore:
        """Both verdicts for each response; ``correct`` follows ``scoring``."""
        extracted = [self.extract(problem, r) for r in responses]
        verified = [
            self.judge(problem, e) or states_gold(r, problem.answer) for r, e in zip(responses, extracted)
        ]
        given = (self.official_extractions or {}).get(problem.id)
        if given is not None and len(given) == len(responses):
            official_extracted = list(given)
        else:
            official_extracted = [self.official_extract(problem, r) for r in responses]
        official = [self.official_judge(problem, e) for e in official_extracted]
        return RecordScore(
            problem.id,
            list(responses),
            extracted,
            verified if self.scoring == "verified" else official,
            extracted_official=official_extracted,
            correct_official=official,
            correct_verified=verified,
        )

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

    def _metrics(self, problems: Sequence[Problem], records: Mapping[str, RecordScore]) -> tuple[dict, dict]:
        scores = [records[p.id].score for p in problems]
        metrics: dict[str, float] = {"accuracy": accuracy_entry(scores)["accuracy"]}
        extra_metrics, extra_breakdowns = self.extra_metrics(problems, records)
        metrics.update(extra_metrics)
        return metrics, extra_breakdowns

    @property
    def headline(self) -> str:
        """Which verdicts ``correct`` holds: ``official`` (also under ``quick-match``) or ``verified``."""
        return "verified" if self.scoring == "verified" else "official"

    def _overall_of(
        self, problems: Sequence[Problem], records: Mapping[str, RecordScore], which: str
    ) -> float:
        if which == self.headline:
            return self.overall(self._metrics(problems, records)[0])
        other = {p.id: records[p.id].with_verdicts(which) for p in problems}
        return self.overall(self._metrics(problems, other)[0])

    def results(self, problems: Sequence[Problem], records: Mapping[str, RecordScore]) -> dict[str, Any]:
        """``{"benchmark", "overall", "overall_official", "overall_verified", "n_disagree", "metrics",
        "breakdowns", ...}`` with accuracies as fractions; ``overall`` is the ``scoring`` one (official by
        default). ``n_disagree``: records whose official and verified verdicts differ, counted by
        :func:`disagreement_category` in ``disagree_categories``."""
        scores = [records[p.id].score for p in problems]
        metrics, extra_breakdowns = self._metrics(problems, records)
        breakdowns = self.breakdowns(problems, records)
        breakdowns.update(extra_breakdowns)
        missing = [p.id for p in problems if records[p.id].missing]
        n_resp = [len(records[p.id].responses) for p in problems if not records[p.id].missing]
        disagree = [
            p.id
            for p in problems
            if (r := records[p.id]).correct_official is not None
            and r.correct_verified is not None
            and r.correct_official != r.correct_verified
        ]
        categories: dict[str, int] = defaultdict(int)
        for rid in disagree:
            categories[disagreement_category(records[rid])] += 1
        return {
            "benchmark": self.name,
            "overall": self.overall(metrics),
            "overall_official": self._overall_of(problems, records, "official"),
            "overall_verified": self._overall_of(problems, records, "verified"),
            "scoring": self.scoring,
            "extraction": self.extraction,
            "n_disagree": len(disagree),
            "disagree_ids": disagree,
            "disagree_categories": dict(sorted(categories.items())),
            "metrics": metrics,
            "breakdowns": breakdowns,
            "n_records": len(problems),
            "n_correct": accuracy_entry(scores)["correct"],
            "responses_per_record": max(n_resp, default=0),
            "n_missing": len(missing),
            "missing_ids": missing,
        }
