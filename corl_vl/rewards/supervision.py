"""Co-RL labels and rewards for one step, with label-free reliability weighting (``reward.weighting``).

Why a separate object: reliability is *state* — a moving average over steps, per agent and optionally per tag —
that the pure reward functions must not hold, and that a resumed run must restore. Every step both estimators
run (agreement with the leave-one-out majority, one-coin Dawid–Skene; :mod:`corl_vl.rewards.reliability`), so a
run logs each agent's estimated reliability whatever weighting it trains with; the configured one weights the
votes. With gold answers (synthetic data, monitoring only) it also logs the label accuracy every weighting
*would* have given on the same answers, so one run compares the weightings without retraining.

Every rank holds every agent's answers for all ids, so every rank computes the same labels and estimates.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from corl_vl.answers.equivalence import equivalent
from corl_vl.rewards import match_rewards, peer_pseudo_labels
from corl_vl.rewards.peer import weighted_peer_rewards
from corl_vl.rewards.reliability import ReliabilityTracker, cluster_cohort, estimate
from corl_vl.rewards.topology import Topology

ESTIMATORS = ("agreement", "dawid_skene")
Answers = Mapping[str, Sequence[str | None]]


class Supervision:
    """Turns every agent's answers into every agent's labels and rewards, tracking reliability across steps."""

    def __init__(self, cfg: Any, topology: Topology, names: Sequence[str]) -> None:
        """``cfg``: the cohort config (its ``reward`` section)."""
        self.cfg = cfg
        self.topology = topology
        self.names = list(names)
        decay = cfg.reward.reliability_ema
        self.trackers = {kind: ReliabilityTracker(len(names), decay) for kind in ESTIMATORS}
        self.metrics: dict[str, dict[str, float]] = {}

    def step(
        self,
        answers: Mapping[str, Answers],
        ids: Sequence[str],
        choices: Mapping[str, Sequence[str] | None],
        *,
        tags: Mapping[str, str] | None = None,
        gold: Mapping[str, str] | None = None,
    ) -> tuple[dict[str, dict[str, list[float]]], dict[str, dict[str, str | None]]]:
        """``(rewards[name][pid], labels[name][pid])`` for every agent over ``ids``; fills :attr:`metrics`."""
        tp, soft = self.cfg.reward, self.cfg.reward.peer_reward == "soft"
        ordered = [{pid: answers[name][pid] for pid in ids} for name in self.names]
        reliability = self._update_reliability(ordered, ids, choices, tags or {})
        self.metrics = {name: {} for name in self.names}
        for kind in ESTIMATORS:
            for j, name in enumerate(self.names):
                value = self.trackers[kind].get()[j]
                if value is not None:
                    self.metrics[name][f"reliability/{kind}"] = value
        rewards, labels = self._rewards(ordered, tp.weighting, soft, reliability.get(tp.weighting), choices)
        if gold:
            self._label_accuracy(ordered, ids, reliability, choices, gold)
        return (
            {name: rewards[i] for i, name in enumerate(self.names)},
            {name: labels[i] for i, name in enumerate(self.names)},
        )

    def _update_reliability(
        self,
        answers: list[dict[str, Sequence[str | None]]],
        ids: Sequence[str],
        choices: Mapping[str, Sequence[str] | None],
        tags: Mapping[str, str],
    ) -> dict[str, dict[str, list[float | None]]]:
        """Estimate this step, update the moving averages; per estimator, each problem's per-agent reliability."""
        problems = cluster_cohort(answers, choices=choices)
        groups: dict[str, list[str]] = {}
        for pid in ids:
            if pid in tags:
                groups.setdefault(tags[pid], []).append(pid)
        per_problem: dict[str, dict[str, list[float | None]]] = {}
        for kind, tracker in self.trackers.items():
            tracker.update(estimate(kind, problems, list(ids)))
            for tag, members in groups.items():
                tracker.update(estimate(kind, problems, members), tag)
            per_problem[kind] = {pid: tracker.get(tags.get(pid)) for pid in ids}
        return per_problem

    def _rewards(
        self,
        answers: list[dict[str, Sequence[str | None]]],
        weighting: str,
        soft: bool,
        reliability: Mapping[str, Sequence[float | None]] | None,
        choices: Mapping[str, Sequence[str] | None],
    ) -> tuple[list[dict[str, list[float]]], list[dict[str, str | None]]]:
        tp = self.cfg.reward
        if weighting == "uniform" and not soft and tp.min_weight_share == 0.0:  # the plain Co-RL vote
            votes = peer_pseudo_labels(
                answers, self.topology, choices=choices, tie_policy=tp.ties, min_share=tp.min_share
            )
            labels = [{pid: v.label for pid, v in per.items()} for per in votes]
            return [match_rewards(a, lab, choices) for a, lab in zip(answers, labels)], labels
        rewards, wvotes = weighted_peer_rewards(
            answers, self.topology, reliability=None if weighting == "uniform" else reliability,
            soft=soft, choices=choices, tie_policy=tp.ties,
            min_share=max(tp.min_share, tp.min_weight_share),
        )  # fmt: skip
        return rewards, [{pid: v.label for pid, v in per.items()} for per in wvotes]

    def _label_accuracy(
        self,
        answers: list[dict[str, Sequence[str | None]]],
        ids: Sequence[str],
        reliability: Mapping[str, Mapping[str, Sequence[float | None]]],
        choices: Mapping[str, Sequence[str] | None],
        gold: Mapping[str, str],
    ) -> None:
        """Monitoring only: the hard labels' accuracy (over labelled problems) and coverage that each weighting
        would give on this step's answers."""
        tp = self.cfg.reward
        checked = [pid for pid in ids if gold.get(pid) is not None]
        if not checked:
            return
        for weighting in ("uniform", *ESTIMATORS):
            rel = None if weighting == "uniform" else reliability[weighting]
            _, votes = weighted_peer_rewards(
                answers, self.topology, reliability=rel, choices=choices, tie_policy=tp.ties,
                min_share=max(tp.min_share, tp.min_weight_share),
            )  # fmt: skip
            for i, name in enumerate(self.names):
                labelled = [pid for pid in checked if votes[i][pid].label is not None]
                m = self.metrics[name]
                m[f"label/coverage_{weighting}"] = len(labelled) / len(checked)
                if labelled:
                    hits = [equivalent(gold[p], votes[i][p].label, choices.get(p)) for p in labelled]
                    m[f"label/accuracy_{weighting}"] = sum(hits) / len(hits)

    def state_dict(self) -> dict[str, Any]:
        return {kind: t.state_dict() for kind, t in self.trackers.items()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        for kind, t in self.trackers.items():
            if kind in state:
                t.load_state_dict(state[kind])
