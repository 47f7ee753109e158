"""Which processes a GPU run starts, on which GPU each runs, and which agents take turns on a shared GPU.

Why one pure function: ``corl-vl plan`` prices exactly the processes ``corl-vl train`` launches, so both read
the layout from :func:`process_layout` (arithmetic on counts: no torch, no devices). The rules:

- every agent runs in its own process(es), with its own torch.distributed world, engine and optimizer;
- without DeepSpeed, one process per agent, one GPU each: G ≥ N puts agent i alone on GPU i (GPUs N … G-1 are
  left over); G < N puts agent i on GPU i mod G, and the agents of one GPU take turns (one active at a time;
  the idle ones' engines sleep, their masters and AdamW moments wait in host memory);
- with DeepSpeed (ZeRO-2/3), agent i gets a block of consecutive GPUs, one process (rank) per GPU: its
  ``agents[i].gpus``, else an equal share of what the others leave (the first agents one more when uneven;
  :func:`corl_vl.train.rank_placement.gpu_counts`). No GPU is shared.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from corl_vl.errors import CorlError
from corl_vl.train.rank_placement import gpu_counts


@dataclass(frozen=True)
class ProcessLayout:
    """``processes``: one ``(agent, gpu)`` per process, agents in config order; ``turns``: per shared GPU, the
    agents that take turns on it (only GPUs with two or more); ``leftover``: GPUs no process uses."""

    gpus: int
    processes: list[tuple[int, int]]
    turns: list[list[int]]
    leftover: list[int]
    deepspeed: bool

    def gpus_of(self, agent: int) -> list[int]:
        """The agent's GPUs (its ranks' GPUs under DeepSpeed; one GPU otherwise)."""
        return [g for a, g in self.processes if a == agent]

    def agents_on(self, gpu: int) -> list[int]:
        """The agents with a process on ``gpu`` (more than one: they take turns)."""
        return [a for a, g in self.processes if g == gpu]

    def turns_with(self, agent: int) -> list[int]:
        """The other agents that share this agent's GPU."""
        return next(([a for a in lane if a != agent] for lane in self.turns if agent in lane), [])

    def describe(self, names: Sequence[str]) -> list[str]:
        """One line per agent (processes, GPUs, turns), one for the leftover GPUs."""
        out = []
        for i, name in enumerate(names):
            gpus = self.gpus_of(i)
            where = ", ".join(f"GPU {g}" for g in gpus)
            line = f"{name}: {len(gpus)} process(es) on {where}"
            if self.deepspeed:
                line += f" (a DeepSpeed engine over its {len(gpus)} rank(s))"
            others = self.turns_with(i)
            if others:
                line += f", takes turns with {', '.join(names[j] for j in others)}"
            out.append(line)
        if self.leftover:
            out.append(f"left over: GPU {', '.join(str(g) for g in self.leftover)} (no process)")
        return out


def process_layout(
    n_agents: int, gpus: int, blocks: Sequence[int | None] | None = None, *, deepspeed: bool
) -> ProcessLayout:
    """The processes of ``n_agents`` agents on ``gpus`` GPUs (module docstring). ``blocks``: each agent's
    ``agents[i].gpus`` (None: an equal share), read only with ``deepspeed``; without it an agent is one process
    and a block above one GPU is refused."""
    if n_agents < 1 or gpus < 1:
        raise CorlError(f"plan: need at least one agent and one GPU (got {n_agents} agents, {gpus} GPUs)")
    requests = list(blocks) if blocks is not None else [None] * n_agents
    if len(requests) != n_agents:
        raise CorlError(f"plan: {len(requests)} GPU counts for {n_agents} agents")
    if not deepspeed:
        for i, r in enumerate(requests):
            if r is not None and r != 1:
                raise CorlError(
                    f"agents.{i}.gpus: {r} GPUs for one agent need distributed.deepspeed (one process per "
                    "GPU); without it each agent is one process on one GPU"
                )
        processes = [(i, i % gpus) for i in range(n_agents)]
        used = {g for _, g in processes}
        lanes = [[a for a, g in processes if g == gpu] for gpu in range(gpus)]
        turns = [lane for lane in lanes if len(lane) > 1]
        return ProcessLayout(gpus, processes, turns, [g for g in range(gpus) if g not in used], False)
    if gpus < n_agents and all(r is None for r in requests):
        raise CorlError(
            f"distributed.deepspeed: {n_agents} agents need at least {n_agents} GPUs (a block each), {gpus} "
            "given; drop it (--set distributed.deepspeed=null) to have the agents take turns"
        )

    counts = gpu_counts(requests, gpus)
    processes, start = [], 0
    for i, count in enumerate(counts):
        processes.extend((i, g) for g in range(start, start + count))
        start += count
    return ProcessLayout(gpus, processes, [], list(range(start, gpus)), True)
