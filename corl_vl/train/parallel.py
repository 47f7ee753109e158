"""Running one phase of every agent (its rollout, or its update) one after another or in concurrent threads.

Why threads in one process (``train.parallel_agents``): agents share nothing during a phase — each owns its
model, optimizer, engine and sampling generator — so their phases can overlap, and PyTorch kernels release the
GIL. Each thread gets an equal share of the process's intra-op threads, so N agents do not oversubscribe the
cores. The results are the same as one after another: every agent's work depends only on its own state and
seeds, and the phase returns the agents' results in their order.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from typing import TypeVar

import torch

T = TypeVar("T")
R = TypeVar("R")


class AgentPhases:
    """``map(fn, items)``: ``fn`` over each agent's item, in order, or concurrently (one thread per agent)."""

    def __init__(self, n_agents: int, *, parallel: bool) -> None:
        self.parallel = parallel and n_agents > 1
        self.total_threads = torch.get_num_threads()
        self.threads_per_agent = max(1, self.total_threads // max(n_agents, 1))
        self._pool = ThreadPoolExecutor(max_workers=n_agents) if self.parallel else None

    def map(self, fn: Callable[[T], R], items: Sequence[T]) -> list[R]:
        if self._pool is None:
            return [fn(item) for item in items]

        def run(item: T) -> R:
            torch.set_num_threads(self.threads_per_agent)  # per thread: this worker's OpenMP team size
            return fn(item)

        try:
            futures = [self._pool.submit(run, item) for item in items]
            wait(futures)  # every agent finishes its phase before an error is raised
            return [f.result() for f in futures]  # re-raises the first failing agent's error, in agent order
        finally:
            # a worker's setting is also the default of threads started later: restore the process's own
            torch.set_num_threads(self.total_threads)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
