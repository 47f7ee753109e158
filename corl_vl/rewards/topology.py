"""Who supervises whom in a cohort: each agent's pseudo-labels come from its supervisors' answers.

Direction, everywhere in corl-vl: "j supervises i" means j's answers vote for i's labels. An agent never
supervises itself (its own answers never vote on its own label), and every agent has at least one supervisor.

- ``mutual()``: two agents label each other (0 ← 1, 1 ← 0).
- ``ring(n)``: agent i is supervised by agent (i + 1) mod n (the paper's directed ring for N ≥ 3);
  ``ring(2)`` equals ``mutual()``.
- ``all_peers(n)``: agent i is supervised by every other agent; their answers are pooled into one vote.
- ``from_edges(n, edges)``: edges are ``(supervisor, agent)`` pairs, i.e. ``j → i``.
- ``from_config(spec, n_agents)``: ``"mutual" | "ring" | "all_peers"``, a list of supervisor lists (one per
  agent), or ``{"graph": {agent: [supervisors]}}`` with agents given by index or by name.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from corl_vl.errors import CorlError

NAMED = ("mutual", "ring", "all_peers")
TOPOLOGIES = (*NAMED, "graph")  # reward.topology: graph reads reward.edges


@dataclass(frozen=True)
class Topology:
    """A validated supervision graph over agents ``0 .. n_agents - 1``."""

    n_agents: int
    supervisor_sets: tuple[tuple[int, ...], ...]
    name: str = "graph"

    def __post_init__(self) -> None:
        if self.n_agents < 2:
            raise CorlError(f"topology {self.name!r}: a cohort needs at least 2 agents, got {self.n_agents}")
        if len(self.supervisor_sets) != self.n_agents:
            raise CorlError(
                f"topology {self.name!r}: {len(self.supervisor_sets)} supervisor lists for {self.n_agents} agents"
            )
        for i, sups in enumerate(self.supervisor_sets):
            if not sups:
                raise CorlError(f"topology {self.name!r}: agent {i} has no supervisor")
            for j in sups:
                if isinstance(j, bool) or not isinstance(j, int) or not 0 <= j < self.n_agents:
                    raise CorlError(
                        f"topology {self.name!r}: agent {i}'s supervisor {j!r} is not an agent index "
                        f"in 0..{self.n_agents - 1}"
                    )
                if j == i:
                    raise CorlError(f"topology {self.name!r}: agent {i} supervises itself (self-loop)")
            if len(set(sups)) != len(sups):
                raise CorlError(f"topology {self.name!r}: agent {i} lists a supervisor twice: {list(sups)}")

    def supervisors(self, i: int) -> tuple[int, ...]:
        """The agents whose answers vote for agent ``i``'s labels."""
        if not 0 <= i < self.n_agents:
            raise IndexError(f"agent {i} is not in 0..{self.n_agents - 1}")
        return self.supervisor_sets[i]

    def supervisees(self, j: int) -> tuple[int, ...]:
        """The agents that agent ``j`` supervises."""
        return tuple(i for i in range(self.n_agents) if j in self.supervisor_sets[i])

    @property
    def edges(self) -> list[tuple[int, int]]:
        """All ``(supervisor, agent)`` pairs."""
        return [(j, i) for i in range(self.n_agents) for j in self.supervisor_sets[i]]


def mutual() -> Topology:
    """Two agents, each supervised by the other."""
    return Topology(2, ((1,), (0,)), "mutual")


def ring(n: int) -> Topology:
    """Directed ring: agent i is supervised by agent (i + 1) mod n."""
    return Topology(n, tuple(((i + 1) % n,) for i in range(n)), "ring")


def all_peers(n: int) -> Topology:
    """Agent i is supervised by all other agents (their answers pooled into one vote)."""
    return Topology(n, tuple(tuple(j for j in range(n) if j != i) for i in range(n)), "all_peers")


def from_edges(n: int, edges: Iterable[tuple[int, int]]) -> Topology:
    """From ``(supervisor, agent)`` pairs (j → i means j's answers label i)."""
    sups: list[list[int]] = [[] for _ in range(max(n, 0))]
    for edge in edges:
        if len(edge) != 2:
            raise CorlError(f"topology edge {edge!r} must be a (supervisor, agent) pair")
        j, i = edge
        if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < n:
            raise CorlError(f"topology edge {edge!r}: agent {i!r} is not in 0..{n - 1}")
        sups[i].append(j)
    return Topology(n, tuple(tuple(s) for s in sups), "graph")


def _agent_index(key: Any, n: int, names: Sequence[str] | None, where: str) -> int:
    if isinstance(key, bool):
        raise CorlError(f"topology {where}: {key!r} is not an agent index or name")
    if isinstance(key, int):
        if not 0 <= key < n:
            raise CorlError(f"topology {where}: agent index {key} is not in 0..{n - 1}")
        return key
    if isinstance(key, str):
        if names is not None and key in names:
            return list(names).index(key)
        if key.isdigit() and int(key) < n:  # YAML/JSON mapping keys arrive as strings
            return int(key)
        known = f"; agents are {list(names)}" if names else ""
        raise CorlError(f"topology {where}: unknown agent {key!r}{known}")
    raise CorlError(f"topology {where}: {key!r} is not an agent index or name")


def from_config(
    spec: str | Mapping[str, Any] | Sequence[Any],
    n_agents: int,
    *,
    agent_names: Sequence[str] | None = None,
) -> Topology:
    """Build a topology from a config value (see the module docstring for the accepted forms)."""
    if isinstance(spec, str):
        if spec == "mutual":
            if n_agents != 2:
                raise CorlError(
                    f"topology 'mutual' needs exactly 2 agents, got {n_agents}; use ring or all_peers"
                )
            return mutual()
        if spec == "ring":
            return ring(n_agents)
        if spec == "all_peers":
            return all_peers(n_agents)
        raise CorlError(f"unknown topology {spec!r}; choose from {list(NAMED)} or give {{'graph': ...}}")
    if isinstance(spec, Mapping):
        if set(spec) != {"graph"} or not isinstance(spec["graph"], Mapping):
            raise CorlError(
                "topology mapping must be {'graph': {agent: [supervisors, ...]}}, got keys "
                + str(sorted(spec))
            )
        sups: list[list[int]] = [[] for _ in range(n_agents)]
        for key, value in spec["graph"].items():
            i = _agent_index(key, n_agents, agent_names, "graph key")
            if isinstance(value, (str, int)):
                value = [value]
            if not isinstance(value, Sequence):
                raise CorlError(f"topology graph: supervisors of agent {key!r} must be a list, got {value!r}")
            sups[i] = [_agent_index(v, n_agents, agent_names, f"supervisor of {key!r}") for v in value]
        return Topology(n_agents, tuple(tuple(s) for s in sups), "graph")
    if isinstance(spec, Sequence):
        if len(spec) != n_agents:
            raise CorlError(f"topology list has {len(spec)} supervisor lists for {n_agents} agents")
        rows = []
        for i, value in enumerate(spec):
            if isinstance(value, (str, int)):
                value = [value]
            rows.append(
                tuple(_agent_index(v, n_agents, agent_names, f"supervisor of agent {i}") for v in value)
            )
        return Topology(n_agents, tuple(rows), "graph")
    raise CorlError(f"topology must be a name, a list or {{'graph': ...}}, got {type(spec).__name__}")
