"""Which GPUs (ranks) each agent gets: per-agent counts, node-aware, in whole tensor-parallel units.

Why node-aware: an agent's ZeRO all-gathers and gradient reductions run over its own rank group every forward
and backward, so a group that spans two nodes pays the network on every step while one inside a node stays on
NVLink. The rules (each has a test in tests/test_placement.py):

- ``agents[i].gpus`` GPUs per agent; agents without it share the GPUs the others leave as equally as possible
  (the first agents get one unit more when the share is uneven);
- an agent that fits in one node is placed on one node (best fit: the node with the least room that still
  holds it); only when no node has that much room left is it spread over nodes, and the plan says so;
- an agent larger than a node gets whole nodes (no other agent on them), its remainder on one more node;
- GPUs no agent uses are reported (``leftover``); a launch refuses to start processes that would sit idle;
- with ``rollout.tensor_parallel_size`` = T every count is a multiple of T and GPUs are handed out in aligned
  blocks of T inside a node, so each vLLM TP group is T consecutive global ranks on one node — the layout vLLM's
  ``external_launcher`` forms its TP groups in (consecutive ranks of the launch's WORLD).

Everything here is arithmetic on rank lists: no torch, so the plan is tested for any cluster shape on a laptop.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from corl_vl.errors import CorlError


@dataclass
class Placement:
    """The plan: global ranks per node (as launched) and per agent (config order)."""

    names: list[str]
    nodes: list[list[int]]
    groups: list[list[int]]
    tensor_parallel_size: int = 1
    spread: list[str] = field(
        default_factory=list
    )  # agents over several nodes although one node would hold them
    leftover: list[int] = field(default_factory=list)  # ranks no agent uses

    def node_of(self, rank: int) -> int:
        return next(i for i, ranks in enumerate(self.nodes) if rank in ranks)

    def nodes_of(self, agent: int) -> list[int]:
        return sorted({self.node_of(r) for r in self.groups[agent]})

    def tp_groups(self, agent: int) -> list[list[int]]:
        """The agent's vLLM tensor-parallel groups: consecutive blocks of T of its ranks."""
        ranks, t = self.groups[agent], self.tensor_parallel_size
        return [ranks[i : i + t] for i in range(0, len(ranks), t)]

    def used_per_node(self) -> list[int]:
        """How many processes each node runs (its GPUs minus the leftover ones)."""
        return [sum(1 for r in ranks if r not in self.leftover) for ranks in self.nodes]

    def refuse_idle(self) -> None:
        """A launch whose processes no agent uses is an error: they would sit idle for the whole run."""
        if self.leftover:
            world = sum(len(n) for n in self.nodes)
            used = world - len(self.leftover)
            raise CorlError(
                f"distributed: the agents use {used} of the {world} processes; ranks {self.leftover} would sit idle. "
                f"Launch {used} processes (corl-vl launch prints the per-node counts) or give the rest to the "
                "agents (agents[i].gpus)"
            )

    def lines(self) -> list[str]:
        """The plan as printed at the start of a run."""
        total = sum(len(n) for n in self.nodes)
        out = [
            f"placement: {len(self.names)} agents on {len(self.nodes)} node(s), {total} GPU(s), "
            f"rollout tensor parallel {self.tensor_parallel_size}"
        ]
        for i, name in enumerate(self.names):
            nodes = ", ".join(str(n) for n in self.nodes_of(i))
            out.append(
                f"  {name}: {len(self.groups[i])} GPU(s), ranks {_ranges(self.groups[i])}, node(s) {nodes}"
                + (f", {len(self.tp_groups(i))} TP groups" if self.tensor_parallel_size > 1 else "")
            )
        for name in self.spread:
            out.append(
                f"  note: {name} spans nodes (no node had room for it); its ZeRO traffic crosses the network — "
                "change agents[i].gpus so that it fits in one node's free GPUs"
            )
        return out + ([self.leftover_line()] if self.leftover else [])

    def leftover_line(self) -> str:
        per_node = [
            f"node {i}: {sum(1 for r in ranks if r in self.leftover)}"
            for i, ranks in enumerate(self.nodes)
            if any(r in self.leftover for r in ranks)
        ]
        return f"  leftover: {len(self.leftover)} GPU(s) unused ({', '.join(per_node)})"

    def to_dict(self) -> dict[str, Any]:
        """What the run's config.yaml records under ``placement``."""
        return {
            "nodes": [list(n) for n in self.nodes],
            "tensor_parallel_size": self.tensor_parallel_size,
            "agents": {name: list(g) for name, g in zip(self.names, self.groups)},
            "spread": list(self.spread),
            "leftover": list(self.leftover),
        }


def _ranges(ranks: Sequence[int]) -> str:
    """``[0, 1, 2, 5]`` → ``"0-2,5"``."""
    parts: list[str] = []
    for r in ranks:
        if parts and r == int(parts[-1].split("-")[-1]) + 1:
            parts[-1] = f"{parts[-1].split('-')[0]}-{r}"
        else:
            parts.append(str(r))
    return ",".join(parts)


def gpu_counts(requests: Sequence[int | None], total: int, tp: int = 1) -> list[int]:
    """Each agent's GPU count: its request, or an equal share (in units of ``tp``) of what the others leave."""
    fixed = sum(r for r in requests if r is not None)
    if fixed > total:
        raise CorlError(f"agents[i].gpus: the agents ask for {fixed} GPUs, the launch has {total}")
    free_units = (total - fixed) // tp
    open_agents = [i for i, r in enumerate(requests) if r is None]
    base, extra = divmod(free_units, len(open_agents)) if open_agents else (0, 0)
    counts = []
    for i, r in enumerate(requests):
        if r is None:
            r = (base + (1 if open_agents.index(i) < extra else 0)) * tp
            if r == 0:
                raise CorlError(
                    f"agents.{i}.gpus: no GPU left for this agent ({total} GPU(s), {fixed} asked for by the others"
                    f", rollout.tensor_parallel_size={tp}); launch more processes or set agents[i].gpus"
                )
        counts.append(r)
    return counts


def place(
    requests: Sequence[int | None],
    nodes: Sequence[Sequence[int]],
    *,
    tensor_parallel_size: int = 1,
    names: Sequence[str] | None = None,
) -> Placement:
    """Place agents asking for ``requests`` GPUs (None: an equal share) on ``nodes`` (global ranks per node)."""
    tp = tensor_parallel_size
    names = list(names) if names is not None else [f"agent {i}" for i in range(len(requests))]
    if not requests:
        raise CorlError("distributed: at least one agent is required")
    if tp < 1:
        raise CorlError(f"rollout.tensor_parallel_size: must be ≥ 1, got {tp}")
    for i, ranks in enumerate(nodes):
        if not ranks or len(ranks) % tp:
            raise CorlError(
                f"distributed: node {i} runs {len(ranks)} process(es), not a multiple of "
                f"rollout.tensor_parallel_size={tp} (a TP group must stay inside one node)"
            )
    for i, r in enumerate(requests):
        if r is not None and (r < 1 or r % tp):
            raise CorlError(
                f"agents.{i}.gpus: {r} is not a positive multiple of rollout.tensor_parallel_size={tp}"
            )
    counts = gpu_counts(requests, sum(len(n) for n in nodes), tp)
    # free blocks of T ranks per node, lowest ranks first
    free = [[list(ranks[j : j + tp]) for j in range(0, len(ranks), tp)] for ranks in nodes]
    capacity = [len(blocks) for blocks in free]
    for block in (b for blocks in free for b in blocks):
        if tp > 1 and block != list(range(block[0] - block[0] % tp, block[0] - block[0] % tp + tp)):
            raise CorlError(
                f"distributed: ranks {block} are not {tp} consecutive ranks starting at a multiple of {tp}, the "
                "TP groups vLLM's external_launcher forms; launch with torchrun (ranks numbered node by node)"
            )
    groups: list[list[int]] = [[] for _ in requests]
    for i in sorted(range(len(counts)), key=lambda i: -counts[i]):  # largest first, config order on ties
        need = counts[i] // tp
        # larger than any node's free room: whole empty nodes first (the largest, then the lowest index)
        while need and not any(len(blocks) >= need for blocks in free):
            empty = [n for n in range(len(free)) if free[n] and len(free[n]) == capacity[n]]
            if not empty:
                break
            n = max(empty, key=lambda n: (capacity[n], -n))
            groups[i] += [r for block in free[n] for r in block]
            need, free[n] = need - capacity[n], []
        fits = [n for n in range(len(free)) if len(free[n]) >= need]
        if need and fits:  # best fit: the node with the least room that holds the rest
            n = min(fits, key=lambda n: (len(free[n]), n))
            groups[i] += [r for block in free[n][:need] for r in block]
            free[n] = free[n][need:]
        elif need:  # no node has room: spread over the nodes with the most room
            for n in sorted(range(len(free)), key=lambda n: (-len(free[n]), n)):
                take = min(need, len(free[n]))
                groups[i] += [r for block in free[n][:take] for r in block]
                free[n], need = free[n][take:], need - take
        groups[i].sort()
    leftover = sorted(r for blocks in free for block in blocks for r in block)
    node_of = {r: n for n, ranks in enumerate(nodes) for r in ranks}
    spread = [  # on several nodes although one node is large enough for it
        names[i]
        for i, ranks in enumerate(groups)
        if len({node_of[r] for r in ranks}) > 1 and counts[i] // tp <= max(capacity)
    ]
    return Placement(names, [list(n) for n in nodes], groups, tp, spread, leftover)


def simulated_nodes(n_nodes: int, gpus_per_node: int) -> list[list[int]]:
    """Global ranks per node as torchrun numbers them: node by node, ``gpus_per_node`` each."""
    if n_nodes < 1 or gpus_per_node < 1:
        raise CorlError(f"--nodes and --gpus-per-node must be ≥ 1, got {n_nodes} and {gpus_per_node}")
    return [list(range(n * gpus_per_node, (n + 1) * gpus_per_node)) for n in range(n_nodes)]


def nodes_from_ranks(node_ids: Sequence[Any]) -> list[list[int]]:
    """Global ranks grouped by node, from each rank's node id (index = global rank), nodes in first-rank order."""
    order: dict[Any, list[int]] = {}
    for rank, node in enumerate(node_ids):
        order.setdefault(node, []).append(rank)
    return list(order.values())
