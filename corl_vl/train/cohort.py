"""The cohort step: same problem ids for every agent → rollouts → answers exchanged by id → labels → rewards
→ advantages → every agent updates → weights synced → metrics.

Why one object owns all agents: Co-RL couples agents only through rewards, and the coupling must be exact — the
public release swapped labels through files checked only by length. Here every hand-over is keyed by problem
id and verified: the sampler draws ids, each agent renders *its own view* of those ids, the engine must return
them in order, and :func:`corl_vl.rewards.peer_pseudo_labels` refuses answers for different id sets.

Self-rewarding baselines (TTRL, EMPO, Intuitor, RENT) and the GT reward run through this same loop (each agent
rewarded by itself or the dataset), so comparisons with Co-RL differ only in the reward.

Distributed runs (:mod:`corl_vl.train.distributed`): each process holds only *its* agent and its share of the step's
ids; the answers of every agent for every id arrive through one exchange (a collective), after which labels are
computed from the same data on every rank. With one process the exchange is the identity and the share is all.
"""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from corl_vl.answers import extract_answer
from corl_vl.config import CohortConfig
from corl_vl.data.paired import answer_in_base_options
from corl_vl.data.problem import Problem
from corl_vl.errors import CorlError
from corl_vl.rewards.co_rewarding import twins_of, with_twins
from corl_vl.rewards.combine import step_reward
from corl_vl.rewards.registry import RewardInputs, get_reward
from corl_vl.rewards.topology import Topology, from_config
from corl_vl.train import dynamic, reward_shaping, subsets
from corl_vl.train.agent import Agent, AgentSettings, Batch
from corl_vl.train.agent_rollout import refuse_two_vllm_engines
from corl_vl.train.backends import launch_backend
from corl_vl.train.cohort_data import agent_view, load_base_problems, paired_views
from corl_vl.train.device_placement import DevicePlacement
from corl_vl.train.device_turns import leave_shared_device, process_turn
from corl_vl.train.distributed import DistContext
from corl_vl.train.offload import TurnOffload, turn, turn_offloads
from corl_vl.train.parallel import AgentPhases
from corl_vl.train.prompt_filter import drop_long_prompts
from corl_vl.train.step_metrics import step_metrics
from model_adapters.registry import create_adapter


@dataclass
class Sampler:
    """Seeded epochs over problem ids; its state (epoch, cursor) is all a resume needs."""

    ids: list[str]
    seed: int
    shuffle: bool = True
    epoch: int = 0
    cursor: int = 0

    def _order(self) -> list[str]:
        order = list(self.ids)
        if self.shuffle:
            random.Random(f"corl-vl-sampler:{self.seed}:{self.epoch}").shuffle(order)
        return order

    def next(self, n: int) -> list[str]:
        """The next ``n`` distinct ids (an epoch boundary starts a fresh permutation)."""
        if n > len(self.ids):
            raise CorlError(
                f"data.problems_per_step={n} but the training data has only {len(self.ids)} problems"
            )
        if self.cursor + n > len(self.ids):
            self.epoch, self.cursor = self.epoch + 1, 0
        out = self._order()[self.cursor : self.cursor + n]
        self.cursor += n
        return out

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "cursor": self.cursor}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.epoch, self.cursor = int(state["epoch"]), int(state["cursor"])


# ------------------------------------------------------------------------------------------------ step
@dataclass
class AgentStep:
    """What one agent produced this step (kept for rewards, metrics and tests)."""

    prompts: list[Any]
    rollouts: list[Any]
    answers: dict[str, list[str | None]]
    rewards: dict[str, list[float]] = field(default_factory=dict)
    labels: dict[str, str | None] = field(default_factory=dict)
    scored: Any = None  # no-grad CompletionLogprobs of every completion
    advantages: list[float] = field(default_factory=list)  # per trained completion, group-major


def rollout_seed(seed: int, step: int, agent_index: int, draw: int = 0) -> int:
    return (seed * 1_000_003 + step * 7_919 + agent_index * 104_729 + draw * 15_485_863) % (2**31 - 1)


class Cohort:
    """All agents, the topology, the sampler; :meth:`step` runs one Co-RL (or baseline) step."""

    def __init__(
        self,
        cfg: CohortConfig,
        agents: list[Agent],
        base: Sequence[Problem],
        *,
        dist: DistContext | None = None,
        placement: DevicePlacement | None = None,
        offloads: dict[str, TurnOffload] | None = None,
    ) -> None:
        self.names = cfg.agent_names()
        self.dist = dist
        # the global indices (config order) of the agents this process holds: all, or its one agent
        self.indices = [dist.agent_index] if dist is not None else list(range(len(cfg.agents)))
        if [a.name for a in agents] != [self.names[i] for i in self.indices]:
            raise CorlError(
                f"agents {[a.name for a in agents]} built for {[self.names[i] for i in self.indices]}"
            )
        self.cfg = cfg
        self.agents = agents
        self.base = {p.id: p for p in base}
        self.sampler = Sampler([p.id for p in base], seed=cfg.train.seed, shuffle=cfg.data.shuffle)
        self.reward = step_reward(cfg.reward)  # reward.name, plus reward.combine's weighted parts
        if self.reward.paired_views:  # twin groups: the rephrased view of each problem (co_rewarding.py)
            self.base.update({p.id: p for p in twins_of(base)})
        self.topology: Topology | None = None
        if self.reward.uses_peers:
            spec: Any = {"graph": cfg.reward.edges} if cfg.reward.topology == "graph" else cfg.reward.topology
            self.topology = from_config(spec, len(self.names), agent_names=self.names)
        # the reward's state across steps (Co-RL: reliability of each supervisor, rewards/supervision.py)
        make_state = self.reward.make_state
        self.supervision: Any = make_state(cfg, self.topology, self.names) if make_state else None
        # train.parallel_agents: phases of the agents in concurrent threads (one process holding them all);
        # rollouts only where every engine is thread-safe (vLLM keeps process-wide forward state); agents
        # sharing a device take turns (one lane), the idle ones' optimizer state in host memory (offload.py)
        parallel = cfg.train.parallel_agents and dist is None
        lanes = placement.lanes() if placement is not None else None
        self.phases = AgentPhases(len(agents), parallel=parallel, lanes=lanes)
        safe = all(getattr(agent.engine, "thread_safe", False) for agent in agents)
        self.rollout_phases = self.phases if safe else AgentPhases(len(agents), parallel=False)
        # agents that take turns on a device keep their optimizer state in host memory between turns (one
        # process: its placement's lanes; a multi-process launch: the processes sharing a GPU, built in from_config)
        self.offloads = (
            offloads if offloads is not None else turn_offloads(agents, placement, cfg.optimizer.offload)
        )
        dynamic.check(cfg.grpo.dynamic_sampling, self.reward, cfg.reward.name)
        self.step_index = 0
        self.dropped_prompts = 0  # data.max_prompt_tokens: problems left out for their prompt's length
        self.last: list[AgentStep] = []  # this process's agents' step data
        self.last_answers: dict[str, dict[str, list[str | None]]] = {}  # every agent's answers, all ids
        self.last_labels: dict[str, dict[str, str | None]] = {}  # co_rl: every agent's labels, all ids

    @classmethod
    def from_config(
        cls,
        cfg: CohortConfig,
        *,
        device: str = "cpu",
        dist: DistContext | None = None,
        problems: Sequence[Problem] | None = None,
        placement: DevicePlacement | None = None,
    ) -> Cohort:
        """Build the agents this process holds (all of them, or in a distributed run its own one), each on
        ``device`` or, with a ``placement`` (one process), on its own device there.

        ``problems``: the training problems when the caller already loaded them (``corl-vl train`` checks the
        data before any model loads), else they are loaded from ``cfg.data``."""
        base = list(problems) if problems is not None else load_base_problems(cfg.data)
        agents, offloads = [], {}
        indices = [dist.agent_index] if dist is not None else range(len(cfg.agents))
        adapters = {
            i: create_adapter(
                cfg.agents[i].model, adapter=cfg.agents[i].adapter, **cfg.agents[i].adapter_options()
            )
            for i in indices
        }
        homes = {i: placement.home(i) if placement is not None else device for i in indices}
        refuse_two_vllm_engines(cfg.rollout, {cfg.agents[i].name: a for i, a in adapters.items()}, homes)
        settings = AgentSettings.of(cfg)  # what each agent reads of the config
        for index in indices:
            agent_cfg, adapter = cfg.agents[index], adapters[index]
            view = agent_view(base, cfg.data, agent_cfg.data_view, text_only=not adapter.supports_images)
            if get_reward(cfg.reward.name).paired_views:  # the original view, plus the rephrase as twins
                view = paired_views(
                    base, cfg.data, agent_cfg, not adapter.supports_images, reward_name=cfg.reward.name
                )
            on = homes[index]
            # on a shared GPU a process builds in its turn: vLLM refuses to start beside an awake engine
            with process_turn(dist, "build"):
                agent = Agent.from_config(agent_cfg, settings, view, device=on, adapter=adapter)
                # a multi-process launch wraps the agent's weights in its distributed backend
                agent.backend = launch_backend(agent.backend, cfg.distributed, dist, cfg.train, cfg.optimizer)
                offload = leave_shared_device(agent, dist)
            agents.append(agent)
            if offload is not None:
                offloads[agent.name] = offload
        base, dropped = drop_long_prompts(base, agents, cfg.data.max_prompt_tokens)
        cohort = cls(cfg, agents, base, dist=dist, placement=placement, offloads=offloads or None)
        cohort.dropped_prompts = dropped
        return cohort

    # -------------------------------------------------------------------------------------- phases
    def step(self) -> dict[str, dict[str, float]]:
        """One step for every agent; returns ``{agent name: metrics}`` (plus ``"cohort"`` for shared ones)."""
        cfg = self.cfg
        ids = self.sampler.next(cfg.data.problems_per_step)
        mine = self.dist.my_share(ids) if self.dist is not None else ids  # this rank's share of the ids
        if self.reward.paired_views:
            ids = mine = with_twins(ids)
        times: dict[str, float] = {}
        for agent in self.agents:  # perf/vision_images_encoded counts this step's scoring and update only
            agent.adapter.pop_vision_images_encoded()
        steps, deferred_sync = self._draw(ids, mine, times)
        trained, extra = steps, {}
        if cfg.grpo.dynamic_sampling:  # groups whose rewards vary, from more draws when needed
            trained, extra = dynamic.fill_batch(self, steps, times)

        metrics: dict[str, dict[str, float]] = {}
        t0 = time.perf_counter()
        rewards = [subsets.reward_tensor(agent_step) for agent_step in steps]
        trained_rewards = [subsets.reward_tensor(agent_step) for agent_step in trained]
        updated = self.phases.map(self._update_one, list(zip(self.agents, trained, trained_rewards)))
        wall = time.perf_counter() - t0
        t_update, t_sync = sum(u[1] for u in updated), sum(u[2] for u in updated)
        if self.phases.parallel:  # the phase's wall time, split between update and sync as agents spent it
            t_update, t_sync = (wall * t / max(t_update + t_sync, 1e-12) for t in (t_update, t_sync))
        for agent, agent_step, r, (m, _, _) in zip(self.agents, steps, rewards, updated):
            m.update(step_metrics(mine, agent_step, r, self.base, self.reward.uses_peers))
            if self.supervision is not None:
                m.update(self.supervision.metrics.get(agent.name, {}))
            m.update(extra.get(agent.name, {}))
            m["perf/vision_images_encoded"] = float(agent.adapter.pop_vision_images_encoded())  # 0: text
            metrics[agent.name] = m
        times["time/update"], times["time/sync"] = t_update, t_sync + deferred_sync
        for m in metrics.values():
            m.update(times)
        self.step_index += 1
        self.last = trained
        return metrics

    def _draw(self, ids: list[str], mine: list[str], times: dict[str, float], draw: int = 0) -> Any:
        """Rollouts of ``mine`` by every agent, answers, the exchange, rewards for all ``ids``; returns
        ``(AgentSteps cut to the trained k, seconds of deferred weight sync)``. ``draw``: > 0 for the extra
        draws of ``grpo.dynamic_sampling`` (their own rollout seeds)."""
        cfg = self.cfg
        with process_turn(
            self.dist, f"rollout {self.step_index}"
        ):  # a shared GPU: generate and score in turn
            steps, deferred_sync = self._generate(ids, mine, times, draw)
        t0 = time.perf_counter()
        local = {agent.name: agent_step.answers for agent, agent_step in zip(self.agents, steps)}
        self.last_answers = local if self.dist is None else self.dist.exchange(ids, local, self.names)
        self._rewards(ids, mine, steps)
        steps = [
            subsets.first_k(agent_step, cfg.grpo.k) for agent_step in steps
        ]  # grpo.votes: the rest only voted
        times["time/reward"] = times.get("time/reward", 0.0) + time.perf_counter() - t0
        return steps, deferred_sync

    def _generate(
        self, ids: list[str], mine: list[str], times: dict[str, float], draw: int
    ) -> tuple[list[AgentStep], float]:
        """Every agent's rollouts and answers for ``mine``, engines put to sleep, the no-grad scores where read;
        returns ``(steps, seconds of deferred weight sync)``."""
        cfg = self.cfg
        t0 = time.perf_counter()
        steps: list[AgentStep] = []
        # a rollout covers this rank's tensor-parallel group's share (T = 1, or one process: its own share)
        rolled = self.dist.rollout_share(ids) if self.dist is not None else mine
        # prompts are rendered here, one agent after another: views share problems, whose images load lazily
        # (PIL is not thread-safe there), and processors are never run concurrently
        jobs = [(i, agent, agent.encode(rolled)) for i, agent in zip(self.indices, self.agents)]
        outputs = self.rollout_phases.map(
            lambda job: job[1].rollout(
                rolled, seed=rollout_seed(cfg.train.seed, self.step_index, job[0], draw), prompts=job[2]
            ),
            jobs,
        )
        for agent, (prompts, rollouts) in zip(self.agents, outputs):
            if rolled != mine:  # keep this rank's part of its TP group's rollouts
                kept = [i for i, r in enumerate(rollouts) if r.problem_id in mine]
                prompts, rollouts = [prompts[i] for i in kept], [rollouts[i] for i in kept]
            answers = {  # read against the agent's own options, stated against the base problem's
                r.problem_id: [self._base_answer(agent, r.problem_id, c.text) for c in r.completions]
                for r in rollouts
            }
            steps.append(AgentStep(prompts=prompts, rollouts=rollouts, answers=answers))
        # a sync deferred while the engine slept ran at the start of this rollout: report it as sync time
        deferred_sync = sum(agent.take_sync_seconds() for agent in self.agents)
        times["time/rollout"] = times.get("time/rollout", 0.0) + time.perf_counter() - t0 - deferred_sync

        t0 = time.perf_counter()
        for agent in self.agents:
            agent.release_engine()
        # the no-grad pass over every completion runs only for what reads it; else the update takes the
        # gradient pass's logprobs (Agent.update); several updates per batch need the pre-update logprobs
        if self.reward.uses_scores or cfg.train.log_entropy or cfg.grpo.updates_per_batch > 1:
            jobs = list(zip(self.agents, steps))
            for agent_step, scored in zip(
                steps, self.phases.map(lambda job: job[0].score(*subsets.step_rows(job[1])), jobs)
            ):
                agent_step.scored = scored
        times["time/reward"] = times.get("time/reward", 0.0) + time.perf_counter() - t0
        return steps, deferred_sync

    def _update_one(
        self, job: tuple[Agent, AgentStep, torch.Tensor]
    ) -> tuple[dict[str, float], float, float]:
        """One agent's update and weight sync: ``(metrics, update seconds, sync seconds)``."""
        agent, agent_step, rewards = job
        t0 = time.perf_counter()
        grpo = self.cfg.grpo
        cut = subsets.truncated(agent_step.rollouts)
        # a shared device: the process's turn (several processes), its optimizer state back for the update
        with process_turn(self.dist, f"update {self.step_index}"), turn(self.offloads.get(agent.name)):
            adv, trained, shaping = reward_shaping.advantages(agent, agent_step, rewards, cut)
            prompts, completions = subsets.step_rows(agent_step)
            agent_step.advantages = adv.tolist()
            m = agent.update(
                Batch(prompts, completions, subsets.rollout_logprobs(agent_step), adv, trained),
                old=agent_step.scored,
                group_size=grpo.k,
            )
        m.update(shaping)
        if grpo.truncated != "keep":
            m["truncated/frac"] = float(cut.float().mean())
        t_update = time.perf_counter() - t0
        agent.sync()  # into the engine now if it is awake, else on its next wake
        return m, t_update, agent.take_sync_seconds()

    def _base_answer(self, agent: Agent, pid: str, text: str) -> str | None:
        view_choices = agent.view[pid].choices
        return answer_in_base_options(
            extract_answer(text, view_choices), view_choices, self.base[pid].choices
        )

    def _rewards(self, ids: list[str], mine: list[str], steps: list[AgentStep]) -> None:
        """Fill this process's agents' rewards (and labels, where the reward votes) with one call of the
        ``reward.name`` registered in :mod:`corl_vl.rewards.registry`.

        Peer labels come from every agent's answers for all ``ids`` (:attr:`last_answers`), so every rank
        computes the same labels; rewards are for this rank's share ``mine``.
        """
        inputs = RewardInputs(
            cfg=self.cfg,
            ids=ids,
            mine=mine,
            names=self.names,
            local=[a.name for a in self.agents],
            answers=self.last_answers,
            problems=self.base,
            scored={agent.name: agent_step.scored for agent, agent_step in zip(self.agents, steps)},
            adapters={agent.name: agent.adapter.name for agent in self.agents},
            state=self.supervision,
            completions={a.name: subsets.texts(s, mine) for a, s in zip(self.agents, steps)},
            token_counts={a.name: subsets.token_counts(s, mine) for a, s in zip(self.agents, steps)},
        )
        rewards, labels = self.reward.function(inputs)
        self.last_labels = labels
        for agent, agent_step in zip(self.agents, steps):
            agent_step.rewards = rewards[agent.name]
            if agent.name in labels:
                agent_step.labels = {pid: labels[agent.name][pid] for pid in mine}

    # ------------------------------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        state: dict[str, Any] = {"step": self.step_index, "sampler": self.sampler.state_dict()}
        if self.supervision is not None:  # reliability moving averages
            state["supervision"] = self.supervision.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.step_index = int(state["step"])
        self.sampler.load_state_dict(state["sampler"])
        if self.supervision is not None and "supervision" in state:
            self.supervision.load_state_dict(state["supervision"])
