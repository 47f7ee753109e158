"""We-Math scoring: per-step accuracy (S1/S2/S3) and the four-dimensional metrics (IK, IG, CM, RM).

Definitions (We-Math ``evaluation/four_dimensional_metrics.py`` and ``accuracy.py``). For a problem group with
sub-problem verdicts s_i and composite verdict m:

- IK (insufficient knowledge): some s_i wrong and m wrong;
- IG (inadequate generalisation): all s_i right and m wrong;
- CM strict: all s_i right and m right; CM loose: some s_i right and m right;
- RM strict: some s_i wrong and m right; RM loose: all s_i wrong and m right.

IK, IG and CM are rates over the number of groups N (525 in testmini); RM's rate is RM / (CM + RM) of the
same strictness. Score = (N − 0.5·IG − RM − IK) / N with RM strict or loose (the official script divides by
the count, not the rate, and hard-codes N = 525; here N is the number of complete groups scored). S1 is the
accuracy over all sub-problems of all groups, S2 over the composite problems of 2-step groups, S3 of 3-step
groups. Only complete groups count (``--limit`` takes whole groups; data may still lack a member); their number
is reported, and with none the metrics are None ("n/a (no complete group)"), not 0.

``official``: the official extraction (text after the last "Answer", ``<>:.`` removed, first character if it
is a letter A–H) must equal the gold letter. ``verified``: the shared extractor (falling back to the official
rule) and the equivalence check. With several responses per record, the metrics are computed for each sample
index and averaged.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from corl_vl.data.problem import Problem
from corl_vl.eval.scoring.base import RecordScore, Scorer

COUNT_KEYS = ("IK", "IG", "CM_strict", "CM_loose", "RM_strict", "RM_loose")


@dataclass(frozen=True)
class Group:
    """One problem group's verdicts: sub-problems in step order, and the composite problem."""

    steps: int
    sub: tuple[bool, ...]
    multi: bool


def classify(group: Group) -> dict[str, bool]:
    """Which of the six categories the group falls in (CM and RM have strict and loose variants)."""
    all_right, any_right = all(group.sub), any(group.sub)
    m = group.multi
    return {
        "IK": not all_right and not m,
        "IG": all_right and not m,
        "CM_strict": all_right and m,
        "CM_loose": any_right and m,
        "RM_strict": not all_right and m,
        "RM_loose": not any_right and m,
    }


def four_dimensional(groups: Sequence[Group]) -> tuple[dict[str, float], dict[str, int]]:
    """(metrics, counts) over complete groups, exactly as defined in the module docstring."""
    n = len(groups)
    counts = dict.fromkeys(COUNT_KEYS, 0)
    for group in groups:
        for key, hit in classify(group).items():
            counts[key] += int(hit)

    def rate(x: int, d: int) -> float:
        return x / d if d else 0.0

    metrics = {
        "IK": rate(counts["IK"], n),
        "IG": rate(counts["IG"], n),
        "CM_strict": rate(counts["CM_strict"], n),
        "CM_loose": rate(counts["CM_loose"], n),
        "RM_strict": rate(counts["RM_strict"], counts["CM_strict"] + counts["RM_strict"]),
        "RM_loose": rate(counts["RM_loose"], counts["CM_loose"] + counts["RM_loose"]),
        "score_strict": rate(n - 0.5 * counts["IG"] - counts["RM_strict"] - counts["IK"], n),
        "score_loose": rate(n - 0.5 * counts["IG"] - counts["RM_loose"] - counts["IK"], n),
    }
    subs = [s for g in groups for s in g.sub]
    two = [g.multi for g in groups if g.steps == 2]
    three = [g.multi for g in groups if g.steps == 3]
    metrics["S1"] = rate(sum(subs), len(subs))
    metrics["S2"] = rate(sum(two), len(two))
    metrics["S3"] = rate(sum(three), len(three))
    return metrics, counts


def official_letter(response: str) -> str | None:
    """The official extraction: after the last "Answer", drop ``<>:.``, keep the first char if in A–H."""
    tail = response.split("Answer")[-1].strip()
    for ch in "<>:.":
        tail = tail.replace(ch, "")
    tail = tail.strip()
    return tail[0] if tail and tail[0] in "ABCDEFGH" else None


def collect_groups(problems: Sequence[Problem], verdict: Mapping[str, bool]) -> tuple[list[Group], int]:
    """Complete groups from per-record verdicts, and how many incomplete groups were skipped."""
    members: dict[str, dict[str, bool]] = defaultdict(dict)
    steps: dict[str, int] = {}
    for p in problems:
        members[p.meta["group"]][p.meta["step"]] = verdict[p.id]
        steps[p.meta["group"]] = p.meta["steps"]
    groups, incomplete = [], 0
    for gid, found in members.items():
        n = steps[gid]
        wanted = [str(i) for i in range(1, n + 1)]
        if any(k not in found for k in [*wanted, "multi"]):
            incomplete += 1
            continue
        groups.append(Group(n, tuple(found[k] for k in wanted), found["multi"]))
    return groups, incomplete


@dataclass
class WeMathScorer(Scorer):
    name: str = "wemath"
    breakdown_keys: tuple[str, ...] = ("key", "knowledge_concept")

    def extract(self, problem: Problem, response: str) -> str | None:
        found = super().extract(problem, response)
        return found if found is not None else official_letter(response)

    def official_extract(self, problem: Problem, response: str) -> str | None:
        return official_letter(response)

    def official_judge(self, problem: Problem, extracted: str | None) -> bool:
        return extracted is not None and problem.answer is not None and extracted == problem.answer.strip()

    def extra_metrics(
        self, problems: Sequence[Problem], records: Mapping[str, RecordScore]
    ) -> tuple[dict[str, float], dict[str, Any]]:
        n_samples = max((len(records[p.id].correct) for p in problems), default=1) or 1
        runs = []
        for j in range(n_samples):
            verdict = {
                p.id: (records[p.id].correct[j] if j < len(records[p.id].correct) else False)
                for p in problems
            }
            groups, incomplete = collect_groups(problems, verdict)
            runs.append(four_dimensional(groups))
        metrics: dict[str, float | None] = {k: sum(r[0][k] for r in runs) / len(runs) for k in runs[0][0]}
        if not groups:  # no complete group (e.g. a --limit that cuts every group): no score, not 0
            metrics = dict.fromkeys(metrics, None)
        counts: dict[str, float] = {k: sum(r[1][k] for r in runs) / len(runs) for k in COUNT_KEYS}
        extra = {"counts": {**counts, "groups": len(groups), "incomplete_groups": incomplete}}
        return metrics, {"four_dimensional": extra}

    def overall(self, metrics: Mapping[str, float | None]) -> float | None:
        """We-Math's headline is the strict score; None when no group is complete."""
        return metrics["score_strict"]
