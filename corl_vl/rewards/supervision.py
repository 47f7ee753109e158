"""Co-RL labels and rewards for one step, with label-free reliability weighting (``reward.weighting``).

Why a separate object: reliability is *state* — a moving average over steps, per agent and optionally per tag —
that the pure reward functions must not hold, and that a resumed run must restore. Every step both estimators
run (agreement with the leave-one-out majority, one-coin Dawid–Skene; :mod:`corl_vl.rewards.reliability`), so a
run logs each agent's estimated reliability whatever weighting it trains with; the configured one weights the
votes. The weights of agent i's supervisors are estimated without agent i's answers (leave-one-out): with them,
an agent that copies one peer would make that peer look reliable and vote its own answer in as its label. With gold answers (synthetic data, monitoring only) it also logs the label accuracy every weighting
*would* have given on the same answers, so one run compares the weightings without retraining.

Every rank holds every agent's answers for all ids, so every rank computes the same labels and estimates.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from corl_vl.answers.equivalence import equivalent
from corl_vl.rewards import match_rewards, peer_pseudo_labels
from corl_vl.rewards.peer import weighted_peer_rewards
from corl_vl.rewards.reliability import ReliabilityTracker, cluster_cohort, estimate
from corl_vl.rewards.topology import Topology

if TYPE_CHECKING:  # types only: config_validation reads the reward registry, not the other way round
    from corl_vl.config import RewardConfig

ESTIMATORS = ("agreement", "dawid_skene")
Answers = Mapping[str, Sequence[str | None]]


class Supervision:
    """Turns every agent's answers into every agent's labels and rewards, tracking reliability across steps."""

    def __init__(self, settings: RewardConfig, topology: Topology, names: Sequence[str]) -> None:
        """``settings``: the config's ``reward`` section (estimator, weighting, peer reward, reliability EMA)."""
        self.settings = settings
        self.topology = topology
        self.names = list(names)
        decay, n = settings.reliability_ema, len(names)
        # logged: every agent's reliability from all answers; weighting agent i's supervisors: estimates made
        # without agent i's answers (leave-one-out), so an agent that copies a peer cannot vote itself a label
        self.trackers = {kind: ReliabilityTracker(n, decay) for kind in ESTIMATORS}
        self.loo_trackers = {kind: [ReliabilityTracker(n, decay) for _ in names] for kind in ESTIMATORS}
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
        tp, soft = self.settings, self.settings.peer_reward == "soft"
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
    ) -> dict[str, list[dict[str, list[float | None]]]]:
        """Estimate this step and update the moving averages. Returns, per estimator and per agent i, each
        problem's reliability of every agent as estimated without agent i's answers (None at i)."""
        groups: dict[str, list[str]] = {}
        for pid in ids:
            if pid in tags:
                groups.setdefault(tags[pid], []).append(pid)
        self._track(self.trackers, cluster_cohort(answers, choices=choices), ids, groups, skip=None)
        per_agent: dict[str, list[dict[str, list[float | None]]]] = {kind: [] for kind in ESTIMATORS}
        for i in range(len(answers)):
            others = cluster_cohort([a for j, a in enumerate(answers) if j != i], choices=choices)
            trackers = {kind: self.loo_trackers[kind][i] for kind in ESTIMATORS}
            self._track(trackers, others, ids, groups, skip=i)
            for kind, tracker in trackers.items():
                per_agent[kind].append({pid: tracker.get(tags.get(pid)) for pid in ids})
        return per_agent

    @staticmethod
    def _track(
        trackers: Mapping[str, ReliabilityTracker],
        problems: Mapping[str, Any],
        ids: Sequence[str],
        groups: Mapping[str, list[str]],
        skip: int | None,
    ) -> None:
        """Update ``trackers`` with this step's estimates (overall and per tag); agent ``skip``'s answers were
        left out of ``problems``, so its own entry stays empty."""

        def full(values: list[float | None]) -> list[float | None]:
            return values if skip is None else [*values[:skip], None, *values[skip:]]

        for kind, tracker in trackers.items():
            tracker.update(full(estimate(kind, problems, list(ids))))
            for tag, members in groups.items():
                tracker.update(full(estimate(kind, problems, members)), tag)

    def _rewards(
        self,
        answers: list[dict[str, Sequence[str | None]]],
        weighting: str,
        soft: bool,
        reliability: Sequence[Mapping[str, Sequence[float | None]]] | None,
        choices: Mapping[str, Sequence[str] | None],
    ) -> tuple[list[dict[str, list[float]]], list[dict[str, str | None]]]:
        tp = self.settings
        if weighting == "uniform" and not soft and tp.min_weight_share == 0.0:  # the plain Co-RL vote
            votes = peer_pseudo_labels(
                answers, self.topology, choices=choices, tie_policy=tp.ties, min_share=tp.min_share
            )
            labels = [{pid: v.label for pid, v in per.items()} for per in votes]
            return [match_rewards(a, lab, choices) for a, lab in zip(answers, labels)], labels
        rewards, wvotes = weighted_peer_rewards(
            answers,
            self.topology,
            reliability_by_agent=None if weighting == "uniform" else reliability,
            soft=soft,
            choices=choices,
            tie_policy=tp.ties,
            min_share=max(tp.min_share, tp.min_weight_share),
        )
        return rewards, [{pid: v.label for pid, v in per.items()} for per in wvotes]

    def _label_accuracy(
        self,
        answers: list[dict[str, Sequence[str | None]]],
        ids: Sequence[str],
        reliability: Mapping[str, Sequence[Mapping[str, Sequence[float | None]]]],
        choices: Mapping[str, Sequence[str] | None],
        gold: Mapping[str, str],
    ) -> None:
        """Monitoring only: the hard labels' accuracy (over labelled problems) and coverage that each weighting
        would give on this step's answers."""
        tp = self.settings
        checked = [pid for pid in ids if gold.get(pid) is not None]
        if not checked:
            return
        for weighting in ("uniform", *ESTIMATORS):
            rel = None if weighting == "uniform" else reliability[weighting]
            _, votes = weighted_peer_rewards(
                answers,
                self.topology,
                reliability_by_agent=rel,
                choices=choices,
                tie_policy=tp.ties,
                min_share=max(tp.min_share, tp.min_weight_share),
            )
            for i, name in enumerate(self.names):
                labelled = [pid for pid in checked if votes[i][pid].label is not None]
                m = self.metrics[name]
                m[f"label/coverage_{weighting}"] = len(labelled) / len(checked)
                if labelled:
                    hits = [equivalent(gold[p], votes[i][p].label, choices.get(p)) for p in labelled]
                    m[f"label/accuracy_{weighting}"] = sum(hits) / len(hits)

    def state_dict(self) -> dict[str, Any]:
        state: dict[str, Any] = {kind: t.state_dict() for kind, t in self.trackers.items()}
        state["leave_one_out"] = {
            kind: [t.state_dict() for t in ts] for kind, ts in self.loo_trackers.items()
        }
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        for kind, t in self.trackers.items():
            if kind in state:
                t.load_state_dict(state[kind])
        for kind, saved in state.get("leave_one_out", {}).items():  # absent in runs saved before it existed
            for tracker, values in zip(self.loo_trackers.get(kind, []), saved):
                tracker.load_state_dict(values)
