"""Error decoupling between models: does a candidate partner fail on *different* problems?

Co-RL only corrects an agent where its peer is right while it is wrong, so a good partner has decoupled errors.
The paper's Appendix A measures this on pretrained checkpoints (500 MATH problems, one zero-shot sample at T=0.8)
with Cohen's κ between the two models' per-problem correctness and a complementarity ``c``; different-family
pairs had κ ≤ 0.42 and c ≥ 29.4, same-family and seed-only pairs κ ≥ 0.51 and c ≤ 24.6, and no pair fell between.

Definitions (docs/theory.md gives the reasoning), with a 2×2 table of n problems — n11 both right, n10 only A
right, n01 only B right, n00 both wrong:

* κ = (p_o − p_e) / (1 − p_e), p_o = (n11 + n00)/n, p_e = a·b + (1−a)(1−b) with accuracies a, b; undefined
  (None) when either model is constant (accuracy 0 or 1): then p_o = p_e for any partner, so κ is 0 or 0/0
  whatever the other model does, and says nothing about decoupling (an always-right and an always-wrong model
  would read as κ = 0, a "good partner").
* error overlap = n00 / (n00 + n10 + n01), the Jaccard overlap of the two error sets; also P(B wrong | A wrong).
* complementarity c = 100 · (n10 + n01)/n: the % of problems where exactly one model is right, i.e. where one
  can supervise the other towards the correct answer. The paper does not print its formula; this one reproduces
  its numbers (c ≈ 2a(1−a)(1−κ)·100 gives 29 at κ = 0.42 and 24.5 at κ = 0.51 for a ≈ ½).
* recommendation: by κ against the paper's two observed ranges (κ is chance-corrected, so it transfers across
  accuracy levels; c shrinks as both accuracies approach 0 or 1, so its thresholds only hold near the paper's).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from corl_vl.answers import equivalent, grade, grade_record
from corl_vl.answers.grading import record_choices, record_precision
from corl_vl.errors import CorlError
from corl_vl.eval.generate import Generator, default_decoding
from corl_vl.io import check_answer_value, read_jsonl, write_jsonl_atomic

#: Largest κ the paper observed for a different-family pair (App. A).
KAPPA_DECOUPLED_MAX = 0.42
#: Smallest κ the paper observed for a same-family or seed-only pair (App. A).
KAPPA_CORRELATED_MIN = 0.51
#: Smallest complementarity (%) of a different-family pair, largest of a same-family pair (App. A).
COMPLEMENTARITY_DECOUPLED_MIN = 29.4
COMPLEMENTARITY_CORRELATED_MAX = 24.6


@dataclass(frozen=True)
class PairStats:
    """Error-decoupling statistics of models A and B on the same n problems."""

    n: int
    accuracy_a: float
    accuracy_b: float
    kappa: float | None
    kappa_se: float | None  # Cohen's (1960) large-sample standard error, to judge whether n suffices
    error_overlap: float | None
    p_b_wrong_given_a_wrong: float | None
    p_a_wrong_given_b_wrong: float | None
    complementarity: float
    recommendation: str


def table(a: Sequence[bool], b: Sequence[bool]) -> tuple[int, int, int, int]:
    """(n11, n10, n01, n00): both right, only A right, only B right, both wrong."""
    if len(a) != len(b):
        raise CorlError(f"diagnose: correctness vectors differ in length ({len(a)} vs {len(b)})")
    n11 = sum(1 for x, y in zip(a, b) if x and y)
    n10 = sum(1 for x, y in zip(a, b) if x and not y)
    n01 = sum(1 for x, y in zip(a, b) if y and not x)
    return n11, n10, n01, len(a) - n11 - n10 - n01


def cohen_kappa(a: Sequence[bool], b: Sequence[bool]) -> float | None:
    """Cohen's κ between two binary correctness vectors; None when a model never errs or never succeeds."""
    n11, n10, n01, n00 = table(a, b)
    n = n11 + n10 + n01 + n00
    if n == 0:
        raise CorlError("diagnose: no problems to compare")
    acc_a, acc_b = (n11 + n10) / n, (n11 + n01) / n
    p_o = (n11 + n00) / n
    p_e = acc_a * acc_b + (1 - acc_a) * (1 - acc_b)
    if _constant(acc_a) or _constant(acc_b):  # κ is then 0 (or 0/0) whatever the other model does
        return None
    return (p_o - p_e) / (1 - p_e)


def _constant(accuracy: float) -> bool:
    return accuracy in (0.0, 1.0)


def _undefined_reason(acc_a: float, acc_b: float) -> str:
    what = {1.0: "is always right", 0.0: "is always wrong"}
    parts = [f"model {name} {what[acc]}" for name, acc in (("A", acc_a), ("B", acc_b)) if _constant(acc)]
    return (
        f"undefined: {' and '.join(parts)} on these problems, so κ (and partner quality) cannot be judged; "
        "compare on problems where each model sometimes errs and sometimes succeeds"
    )


def recommend(kappa: float | None, accuracy_a: float | None = None, accuracy_b: float | None = None) -> str:
    """One line placing κ against the paper's different-family (≤ 0.42) and same-family (≥ 0.51) ranges."""
    if kappa is None:
        if accuracy_a is not None and accuracy_b is not None:
            return _undefined_reason(accuracy_a, accuracy_b)
        return "undefined: a model is always right or always wrong here, so κ cannot judge the pair"
    kappa = round(kappa, 9)  # a table that gives exactly 0.42 must not fall to the other side by rounding
    if kappa <= KAPPA_DECOUPLED_MAX:
        return (
            f"good partner: errors decoupled (κ ≤ {KAPPA_DECOUPLED_MAX}, the paper's different-family range)"
        )
    if kappa >= KAPPA_CORRELATED_MIN:
        return (
            f"correlated errors: prefer a different family (κ ≥ {KAPPA_CORRELATED_MIN}, "
            "the paper's same-family range)"
        )
    return (
        f"borderline: κ lies between the paper's different-family (≤ {KAPPA_DECOUPLED_MAX}) "
        f"and same-family (≥ {KAPPA_CORRELATED_MIN}) ranges"
    )


def _ratio(num: int, den: int) -> float | None:
    return num / den if den else None


def pair_stats(a: Sequence[bool], b: Sequence[bool]) -> PairStats:
    """All statistics for one pair of aligned correctness vectors (same problems, same order)."""
    n11, n10, n01, n00 = table(a, b)
    n = n11 + n10 + n01 + n00
    kappa = cohen_kappa(a, b)
    acc_a, acc_b = (n11 + n10) / n, (n11 + n01) / n
    p_o = (n11 + n00) / n
    p_e = acc_a * acc_b + (1 - acc_a) * (1 - acc_b)
    se = None if kappa is None else math.sqrt(p_o * (1 - p_o) / n) / (1 - p_e)
    return PairStats(
        n=n,
        accuracy_a=acc_a,
        accuracy_b=acc_b,
        kappa=kappa,
        kappa_se=se,
        error_overlap=_ratio(n00, n00 + n10 + n01),
        p_b_wrong_given_a_wrong=_ratio(n00, n00 + n01),
        p_a_wrong_given_b_wrong=_ratio(n00, n00 + n10),
        complementarity=100.0 * (n10 + n01) / n,
        recommendation=recommend(kappa, acc_a, acc_b),
    )


def _read_rows(path: Path) -> list[tuple[int, str, dict]]:
    """``(line number, id, row)`` of an answers or gold file: every row has a unique string/integer id."""
    rows = read_jsonl(path, what="answers file")
    if not rows:
        raise CorlError(f"{path}: no rows")
    seen: set[str] = set()
    out = []
    for lineno, row in rows:
        if "id" not in row or not isinstance(row["id"], (str, int)) or isinstance(row["id"], bool):
            raise CorlError(f"{path}:{lineno}: field 'id' missing or not a string/integer")
        key = str(row["id"])
        if key in seen:
            raise CorlError(f"{path}:{lineno}: duplicate id {key!r}")
        seen.add(key)
        out.append((lineno, key, row))
    return out


def load_gold(path: str | Path) -> dict[str, dict]:
    """Gold rows keyed by id (``answer`` and optional ``choices``)."""
    path = Path(path)
    gold: dict[str, dict] = {}
    for lineno, key, row in _read_rows(path):
        if "answer" not in row:
            raise CorlError(f"{path}:{lineno}: field 'answer' missing")
        check_answer_value(row["answer"], f"{path}:{lineno} field 'answer'")
        gold[key] = row
    return gold


def _grade(path: Path, lineno: int, row: dict, gold: Mapping[str, dict] | None, extraction: str) -> bool:
    """Correctness of one row: its ``correct`` field, else its response/extracted answer graded against gold
    exactly as ``corl-vl grade`` grades a record (``choices``/``options``, ``question_type``, ``answer_type``,
    ``precision``; the row's own fields win over the gold row's; a response extracted in ``extraction`` mode)."""
    if "correct" in row:
        value = row["correct"]
        if isinstance(value, bool) or value in (0, 1):
            return bool(value)
        raise CorlError(f"{path}:{lineno}: field 'correct' must be true/false, got {value!r}")
    key = str(row["id"])
    ref = row if "answer" in row else (gold or {}).get(key)
    if ref is None:
        where = "no 'answer' field and no --gold file" if gold is None else f"id {key!r} not in the gold file"
        raise CorlError(f"{path}:{lineno}: cannot grade: {where}")
    if "answer" in row:  # a gold row was checked when read; the row's own answer here
        check_answer_value(row["answer"], f"{path}:{lineno} field 'answer'")
    if row.get("extracted") is not None:
        check_answer_value(row["extracted"], f"{path}:{lineno} field 'extracted'")
    record = {**ref, **row, "answer": ref["answer"]}
    try:
        choices, precision = record_choices(record), record_precision(record)
    except (TypeError, ValueError):
        raise CorlError(f"{path}:{lineno}: field 'precision' must be an integer") from None
    if "extracted" in row:
        pred = row["extracted"]
        return bool(
            equivalent(str(ref["answer"]), None if pred is None else str(pred), choices, precision=precision)
        )
    if "response" in row:
        return grade_record(record, extraction=extraction).correct
    raise CorlError(f"{path}:{lineno}: needs a 'correct', 'response' or 'extracted' field")


def load_correctness(
    path: str | Path, gold: Mapping[str, dict] | None = None, *, extraction: str = "lenient"
) -> dict[str, bool]:
    """Per-problem correctness of one model's answers file, keyed by id."""
    path = Path(path)
    return {key: _grade(path, lineno, row, gold, extraction) for lineno, key, row in _read_rows(path)}


def _names(paths: Sequence[Path]) -> list[str]:
    stems = [p.stem for p in paths]
    return stems if len(set(stems)) == len(stems) else [str(p) for p in paths]


def diagnose(
    answer_paths: Sequence[str | Path], gold_path: str | Path | None = None, *, extraction: str = "lenient"
) -> dict:
    """Pairwise error-decoupling report for ≥ 2 answers files, rows matched by id.

    ``extraction`` (``lenient``, as ``grade`` and ``eval``, or ``strict``, the markers peer votes read) applies
    to rows graded from a ``response``; a ``correct`` field is taken as it is, an ``extracted`` answer compared as it is.

    Two files give a flat dict (kappa, error_overlap, complementarity, accuracies, n, recommendation, …); more
    give ``pairs``, one such dict per pair, for the pairwise matrix.
    """
    paths = [Path(p) for p in answer_paths]
    if len(paths) < 2:
        raise CorlError("diagnose: give at least two --answers files")
    gold = load_gold(gold_path) if gold_path is not None else None
    results = [load_correctness(p, gold, extraction=extraction) for p in paths]
    first = results[0]
    for path, res in zip(paths[1:], results[1:]):
        for missing_in, other, ids in (
            (path, paths[0], first.keys() - res.keys()),
            (paths[0], path, res.keys() - first.keys()),
        ):
            if ids:
                example = sorted(ids)[0]
                raise CorlError(
                    f"{missing_in}: id {example!r} (from {other}) is missing; {len(ids)} such ids in all"
                )
    ids = sorted(first)
    vectors = [[res[i] for i in ids] for res in results]
    names = _names(paths)
    accuracies = {name: sum(vec) / len(vec) for name, vec in zip(names, vectors)}
    pairs = []
    for i in range(len(paths)):
        for j in range(i + 1, len(paths)):
            stats = asdict(pair_stats(vectors[i], vectors[j]))
            pairs.append({"a": names[i], "b": names[j], **stats})
    report = {"models": names, "n": len(ids), "extraction": extraction, "accuracies": accuracies}
    if len(paths) == 2:
        return {**report, **{k: v for k, v in pairs[0].items() if k not in ("a", "b", "n")}}
    return {**report, "pairs": pairs}


# ------------------------------------------------------------------------------------ generating the answers


def answers_file_names(models: Sequence[str]) -> list[str]:
    """File stems for the models' answers files: the preset or folder name, made safe and unique."""
    names: list[str] = []
    for model in models:
        base = re.sub(r"[^A-Za-z0-9._-]+", "_", Path(model.rstrip("/")).name) or "model"
        name, k = base, 1
        while name in names:
            k += 1
            name = f"{base}-{k}"
        names.append(name)
    return names


def _model_view(
    problems: list, data: str | Path, split: str | None, limit: int | None, text_model: bool
) -> list:
    """The problems as this model can read them: the original, or the text rendering for a text-only model."""
    if not text_model or not any(p.images for p in problems):
        return problems
    # lazy: PIL
    from corl_vl.data.datasets import load_problems
    from corl_vl.data.paired import verify_paired_views

    view = load_problems(data, split=split, limit=limit, text_only=True, require_answer=True)
    verify_paired_views(problems, view, source=f"{data} (text rendering)")
    return view


def generate_answers(
    models: Sequence[str],
    data: str | Path,
    out_dir: str | Path,
    *,
    split: str | None = None,
    limit: int | None = None,
    temperature: float = 0.8,
    top_p: float = 1.0,
    max_new_tokens: int = 1024,
    seed: int = 0,
    engine: str = "hf",
    batch_size: int = 8,
    device: str = "cpu",
    progress: bool = False,
    extraction: str = "lenient",
) -> list[Path]:
    """One answer per problem per model (the paper's App. A protocol: zero-shot, one sample at T = 0.8).

    Generation goes through the training adapters and rollout engines (:class:`corl_vl.eval.generate.Generator`),
    so each model is judged on its training prompt. Writes ``out_dir/<model>.jsonl`` with ``id, answer,
    response, extracted, correct`` per problem (graded with :func:`corl_vl.answers.grade`) and returns the
    paths, ready for :func:`diagnose`. Responses are cached under ``out_dir/.generations`` keyed by the decoding
    settings, so an interrupted run resumes. The problems need answers (correctness is the point).
    """
    # lazy: PIL
    from corl_vl.data.datasets import load_problems

    if len(models) < 2:
        raise CorlError("diagnose: give at least two --model values")
    problems = load_problems(data, split=split, limit=limit, require_answer=True)
    if not problems:
        raise CorlError(f"{data}: no problems")
    decoding = default_decoding(
        False, 1, temperature=temperature, top_p=top_p, max_new_tokens=max_new_tokens, seed=seed
    )
    out = Path(out_dir)
    paths = []
    for model, name in zip(models, answers_file_names(models)):
        with Generator(model, engine=engine, device=device, batch_size=batch_size) as gen:
            view = _model_view(problems, data, split, limit, text_model=not gen.supports_images)
            responses = gen.generate(
                view, decoding, out / ".generations" / f"{name}.jsonl", progress=progress, description=name
            )
        rows = []
        for p in view:
            text = responses[p.id][0]
            graded = grade(text, str(p.answer), choices=p.choices, extraction=extraction)
            rows.append(
                {
                    "id": p.id,
                    "answer": p.answer,
                    "response": text,
                    "extracted": graded.extracted,
                    "correct": bool(graded.correct),
                }
            )
        path = out / f"{name}.jsonl"
        write_jsonl_atomic(path, rows)
        paths.append(path)
        del gen  # one model in memory at a time
    return paths
