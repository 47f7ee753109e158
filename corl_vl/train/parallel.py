"""Running one phase of every agent (its rollout, or its update) one after another or in concurrent threads.

Why threads in one process (``train.parallel_agents``): agents share nothing during a phase — each owns its
model, optimizer, engine and sampling generator — so their phases can overlap, and PyTorch kernels release the
GIL. Each thread gets an equal share of the process's intra-op threads, so N agents do not oversubscribe the
cores. The results are the same as one after another: every agent's work depends only on its own state and
seeds, and the phase returns the agents' results in their order.

Agents that share a device take turns (:mod:`corl_vl.train.device_placement`): they form one *lane*, run one
after another in one thread, while lanes overlap.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from typing import TypeVar

import torch

T = TypeVar("T")
R = TypeVar("R")


class AgentPhases:
    """``map(fn, items)``: ``fn`` over each agent's item, in order, or concurrently (one thread per lane;
    ``lanes``: groups of agent indices that run one after another, default one lane per agent)."""

    def __init__(
        self, n_agents: int, *, parallel: bool, lanes: Sequence[Sequence[int]] | None = None
    ) -> None:
        self.lanes = [list(lane) for lane in lanes] if lanes is not None else [[i] for i in range(n_agents)]
        self.parallel = parallel and len(self.lanes) > 1
        self.total_threads = torch.get_num_threads()
        self.threads_per_agent = max(1, self.total_threads // max(len(self.lanes), 1))
        self._pool = ThreadPoolExecutor(max_workers=len(self.lanes)) if self.parallel else None

    def map(self, fn: Callable[[T], R], items: Sequence[T]) -> list[R]:
        if self._pool is None:
            return [fn(item) for item in items]

        def run(lane: list[int]) -> tuple[list[R], tuple[int, BaseException] | None]:
            torch.set_num_threads(self.threads_per_agent)  # per thread: this worker's OpenMP team size
            done: list[R] = []
            for i in lane:  # a lane stops at its first failing agent
                try:
                    done.append(fn(items[i]))
                except BaseException as err:  # re-raised below, in agent order
                    return done, (i, err)
            return done, None

        try:
            futures = [self._pool.submit(run, lane) for lane in self.lanes]
            wait(futures)  # every lane finishes its phase before an error is raised
            results = [f.result() for f in futures]
            failed = [failure for _, failure in results if failure is not None]
            if failed:  # the first failing agent's error, in agent order
                raise min(failed, key=lambda failure: failure[0])[1]
            out: dict[int, R] = {}
            for lane, (done, _) in zip(self.lanes, results):
                out.update(zip(lane, done))
            return [out[i] for i in range(len(items))]
        finally:
            # a worker's setting is also the default of threads started later: restore the process's own
            torch.set_num_threads(self.total_threads)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
