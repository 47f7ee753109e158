"""The rewards a cohort can train with (``reward.name`` / ``--baseline``): one table, name → implementation.

Why a table: the cohort step, the config validation and the CLI's ``--baseline`` choices all read the names
from :data:`REWARDS`, so a new reward is one decorated function here (or in a plugin module that imports this
one) and nothing else changes. Each step reward is called **once per cohort step** with every answer it may
need and returns ``(rewards, labels)``: rewards for this process's agents and its share of the ids, and the
labels it voted (empty for label-free rewards without labels), so no vote is computed twice.

The formulas themselves are the pure functions in :mod:`corl_vl.rewards` (docs/reference.md, "Rewards").
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from corl_vl.errors import CorlError
from corl_vl.rewards import plugins
from corl_vl.rewards.co_rewarding import co_rewarding_i_votes, twin_id
from corl_vl.rewards.ground_truth import gt_rewards
from corl_vl.rewards.peer import Answers, match_rewards
from corl_vl.rewards.self_rewards import empo_rewards, intuitor_rewards, rent_rewards, ttrl_labels
from corl_vl.rewards.supervision import Supervision

Rewards = dict[str, dict[str, list[float]]]  # agent → problem id → K rewards
Labels = dict[str, dict[str, str | None]]  # agent → problem id → label (None: no label)


class StepRewards(NamedTuple):
    rewards: Rewards
    labels: Labels


@dataclass
class RewardInputs:
    """Everything a step reward may read. ``answers`` holds every agent's answers for all ``ids`` (a peer
    reward needs its peers'); rewards are wanted for the ``local`` agents on this process's share ``mine``."""

    cfg: Any  # CohortConfig
    ids: list[str]
    mine: list[str]
    names: list[str]  # every agent, in config order
    local: list[str]  # the agents this process trains
    answers: Mapping[str, Answers]
    problems: Mapping[str, Any]  # base problems by id: choices, gold answer, meta
    # local agent → no-grad CompletionLogprobs; filled only for a reward registered with uses_scores=True
    scored: Mapping[str, Any] = field(default_factory=dict)
    adapters: Mapping[str, str] = field(default_factory=dict)  # local agent → adapter name (for errors)
    state: Any = None  # the reward's own state across steps (see RewardSpec.make_state)
    # local agent → problem id (``mine``) → each completion's raw text and its number of tokens
    completions: Mapping[str, Mapping[str, list[str]]] = field(default_factory=dict)
    token_counts: Mapping[str, Mapping[str, list[int]]] = field(default_factory=dict)

    def choices(self, ids: Sequence[str]) -> dict[str, Any]:
        return {pid: self.problems[pid].choices for pid in ids}


@dataclass(frozen=True)
class RewardSpec:
    """A registered reward: the step function, whether it learns from peers, and its per-run state."""

    function: Callable[[RewardInputs], StepRewards]
    uses_peers: bool = False  # labels from other agents' answers: needs ≥ 2 agents and a topology
    paired_views: bool = False  # each agent also samples its rephrased view (twin groups, co_rewarding.py)
    make_state: Callable[[Any, Any, list[str]], Any] | None = None  # (cfg, topology, names) → state
    help: str = ""
    needs_gold: bool = False  # rewards from the dataset's answers: every training problem must have one
    # reads ``RewardInputs.scored`` (token-level: entropy, self-certainty): the cohort then runs the no-grad
    # scoring pass before rewards; without it that pass is skipped (the update takes the gradient pass's)
    uses_scores: bool = False


REWARDS: dict[str, RewardSpec] = {}


def register_reward(
    name: str,
    *,
    uses_peers: bool = False,
    paired_views: bool = False,
    make_state: Callable[[Any, Any, list[str]], Any] | None = None,
    help: str = "",
    uses_scores: bool = False,
    needs_gold: bool = False,
) -> Callable[[Callable[[RewardInputs], StepRewards]], Callable[[RewardInputs], StepRewards]]:
    """Decorator: add a step reward to :data:`REWARDS` under ``name``."""

    def add(function: Callable[[RewardInputs], StepRewards]) -> Callable[[RewardInputs], StepRewards]:
        if name in REWARDS:
            raise CorlError(f"reward '{name}' is registered twice")
        REWARDS[name] = RewardSpec(
            function,
            uses_peers,
            paired_views,
            make_state,
            help,
            needs_gold=needs_gold,
            uses_scores=uses_scores,
        )
        return function

    return add


def load_reward_module(spec: str) -> str:
    """Import ``path/to/file.py:function`` (trusted code) and register ``function``; returns its reward name."""
    name, function, origin = plugins.import_reward_file(spec)
    return _register(name, function, origin=origin, known=REWARDS)


def load_entry_points() -> None:
    """Register every reward of the ``corl_vl.rewards`` entry-point group (once per process)."""
    for name, function, origin in plugins.entry_point_rewards():
        _register(name, function, origin=origin, known=REWARDS)


def _register(name: str, function: Any, *, origin: str, known: dict[str, Any]) -> str:
    spec = known.get(name)
    if spec is not None:
        if spec.function is function:  # the file's own @register_reward, or loaded before
            return name
        raise CorlError(f"reward '{name}' from {origin}: a different reward of that name is registered")
    register_reward(name, help=f"plugin from {origin}")(function)
    return name


def get_reward(name: str) -> RewardSpec:
    load_entry_points()
    if name not in REWARDS:
        raise CorlError(f"reward.name: unknown reward '{name}'; choose from {', '.join(REWARDS)}")
    return REWARDS[name]


def reward_names() -> list[str]:
    """Every registered reward, read at call time (plugins registered after import and the ``corl_vl.rewards``
    entry points included)."""
    load_entry_points()
    return list(REWARDS)


def _supervision(cfg: Any, topology: Any, names: list[str]) -> Any:
    return Supervision(cfg.reward, topology, names)  # Co-RL's state reads the reward section only


@register_reward(
    "co_rl", uses_peers=True, make_state=_supervision, help="Co-RL: rewarded by the peers' majority answer"
)
def co_rl(inputs: RewardInputs) -> StepRewards:
    """Every agent's labels from its supervisors' answers over all ids (every rank computes the same ones);
    weighting and soft rewards: :mod:`corl_vl.rewards.supervision`."""
    tag = inputs.cfg.reward.reliability_tag
    problems = inputs.problems
    tags = {pid: str(problems[pid].meta[tag]) for pid in inputs.ids if tag and tag in problems[pid].meta}
    gold = {pid: problems[pid].answer for pid in inputs.ids if problems[pid].answer is not None}
    rewards, labels = inputs.state.step(
        inputs.answers, inputs.ids, inputs.choices(inputs.ids), tags=tags, gold=gold
    )
    mine = {name: {pid: rewards[name][pid] for pid in inputs.mine} for name in inputs.local}
    return StepRewards(mine, labels)


def _own_answers(inputs: RewardInputs, name: str) -> dict[str, Sequence[str | None]]:
    return {pid: inputs.answers[name][pid] for pid in inputs.mine}


@register_reward("ttrl", help="TTRL: rewarded by the agent's own majority answer")
def ttrl(inputs: RewardInputs) -> StepRewards:
    settings, choices = inputs.cfg.reward, inputs.choices(inputs.mine)
    rewards: Rewards = {}
    labels: Labels = {}
    for name in inputs.local:
        own = _own_answers(inputs, name)
        labels[name] = ttrl_labels(own, choices, tie_policy=settings.ties, min_share=settings.min_share)
        rewards[name] = match_rewards(own, labels[name], choices)
    return StepRewards(rewards, labels)


@register_reward("empo", help="EMPO: rewarded by the frequency of its answer's cluster")
def empo(inputs: RewardInputs) -> StepRewards:
    choices = inputs.choices(inputs.mine)
    return StepRewards({name: empo_rewards(_own_answers(inputs, name), choices) for name in inputs.local}, {})


@register_reward("gt", needs_gold=True, help="supervised reference: rewarded by the dataset's answer")
def ground_truth(inputs: RewardInputs) -> StepRewards:
    choices = inputs.choices(inputs.mine)
    gold = {pid: inputs.problems[pid].answer for pid in inputs.mine}
    rewards = {name: gt_rewards(_own_answers(inputs, name), gold, choices) for name in inputs.local}
    return StepRewards(rewards, {})


def _per_sequence(inputs: RewardInputs, values: Mapping[str, Any]) -> Rewards:
    """One reward per completion (row-major, the same count per problem) → ``{agent: {pid: [K]}}``."""
    out: Rewards = {}
    for name in inputs.local:
        k = len(values[name]) // max(len(inputs.mine), 1)  # grpo.votes completions when more are voted
        out[name] = {
            pid: [float(v) for v in values[name][i * k : (i + 1) * k]] for i, pid in enumerate(inputs.mine)
        }
    return out


@register_reward("intuitor", uses_scores=True, help="Intuitor: rewarded by its own mean self-certainty")
def intuitor(inputs: RewardInputs) -> StepRewards:
    temperature = inputs.cfg.grpo.temperature or 1.0
    values = {}
    for name in inputs.local:
        scored = inputs.scored[name]
        certainty = getattr(scored, "self_certainty", None)
        if certainty is None:
            raise CorlError(
                f"reward.name=intuitor: adapter '{inputs.adapters.get(name, name)}' does not report "
                "per-token self-certainty"
            )
        values[name] = intuitor_rewards(certainty, scored.mask, temperature=temperature)
    return StepRewards(_per_sequence(inputs, values), {})


@register_reward(
    "rent", uses_scores=True, help="RENT: rewarded by low entropy of its own token distributions"
)
def rent(inputs: RewardInputs) -> StepRewards:
    values = {
        name: rent_rewards(inputs.scored[name].entropy, inputs.scored[name].mask) for name in inputs.local
    }
    return StepRewards(_per_sequence(inputs, values), {})


@register_reward(
    "co_rewarding_i", paired_views=True, help="Co-rewarding-I: original and rephrased views label each other"
)
def co_rewarding_i(inputs: RewardInputs) -> StepRewards:
    """Each agent alone: the original view's groups are rewarded by the majority of the rephrased view's
    completions and vice versa (``inputs.mine`` holds the original ids followed by their twins)."""
    settings = inputs.cfg.reward
    originals = [pid for pid in inputs.mine if twin_id(pid) in inputs.mine]
    choices = inputs.choices(originals)
    rewards: Rewards = {}
    labels: Labels = {}
    for name in inputs.local:
        answers = inputs.answers[name]
        per_view, votes = co_rewarding_i_votes(
            {pid: answers[pid] for pid in originals},
            {pid: answers[twin_id(pid)] for pid in originals},
            choices=choices,
            tie_policy=settings.ties,
            min_share=settings.min_share,
        )
        rewards[name] = {**per_view[0], **{twin_id(pid): r for pid, r in per_view[1].items()}}
        labels[name] = {pid: votes[0][pid].label for pid in originals}
        labels[name].update({twin_id(pid): votes[1][pid].label for pid in originals})
    return StepRewards(rewards, labels)


@register_reward("format", help="1 for a completion whose answer could be read, else 0 (for reward.combine)")
def answer_format(inputs: RewardInputs) -> StepRewards:
    own = {name: _own_answers(inputs, name) for name in inputs.local}
    rewards = {
        name: {pid: [float(a is not None) for a in answers] for pid, answers in own[name].items()}
        for name in inputs.local
    }
    return StepRewards(rewards, {})


@register_reward("length", help="minus the completion's share of grpo.max_new_tokens (for reward.combine)")
def length_penalty(inputs: RewardInputs) -> StepRewards:
    budget = inputs.cfg.grpo.max_new_tokens
    rewards = {
        name: {pid: [-n / budget for n in inputs.token_counts[name][pid]] for pid in inputs.mine}
        for name in inputs.local
    }
    return StepRewards(rewards, {})
