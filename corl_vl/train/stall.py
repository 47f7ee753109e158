"""Stall detection: a run whose supervision signal is gone says so, then stops, instead of burning compute.

Why: if an agent never writes a parseable answer, its peers get no labels, every advantage is 0 and nothing
trains — yet every step still "succeeds". The two signals that catch it are ``label/coverage`` (share of
problems with a peer label) and ``answer/parsed_frac`` (share of completions with an answer). Either staying
at exactly 0 for ``train.stall_steps`` steps in a row gives a warning (and the reason in the progress bar);
twice that stops the run with a :class:`~corl_vl.errors.CorlError` naming the agent, the metric and what to
check. A streak restarts on resume (only a fresh run of zeros counts).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping

from corl_vl.errors import CorlError

WATCHED = ("label/coverage", "answer/parsed_frac")

_WHY = {
    "label/coverage": "its peers gave no label for any problem (they write no parseable answer, or never agree)",
    "answer/parsed_frac": "none of its completions has a parseable final answer",
}


class StallMonitor:
    """Counts consecutive zero steps of :data:`WATCHED` per agent; ``stall_steps = 0`` turns it off."""

    def __init__(self, stall_steps: int = 20) -> None:
        if stall_steps < 0:
            raise CorlError(f"train.stall_steps must be >= 0 (0 = off), got {stall_steps}")
        self.stall_steps = stall_steps
        self.streaks: dict[tuple[str, str], int] = {}
        self.warned: set[tuple[str, str]] = set()

    def observe(self, metrics: Mapping[str, Mapping[str, float]]) -> str | None:
        """Record one step's ``{agent: {metric: value}}``; returns the stall reason to show, or None.

        Warns (once per streak, as a line on stderr) when a streak reaches ``stall_steps``; see :meth:`check`.
        """
        if not self.stall_steps:
            return None
        for agent, values in metrics.items():
            for key in WATCHED:
                if key not in values:
                    continue
                stuck = values[key] == 0
                self.streaks[(agent, key)] = self.streaks.get((agent, key), 0) + 1 if stuck else 0
                if not stuck:
                    self.warned.discard((agent, key))
        worst = self._worst()
        if worst is None:
            return None
        (agent, key), steps = worst
        if (agent, key) not in self.warned:
            self.warned.add((agent, key))
            print(
                f"warning: {agent}: {key} has been 0 for {steps} steps — {_WHY[key]}; the run stops after "
                f"{2 * self.stall_steps} such steps",
                file=sys.stderr,
            )
        return f"stall: {agent} {key}=0 for {steps} steps"

    @property
    def stop_reason(self) -> str | None:
        """The message to stop with once a streak reaches twice ``stall_steps``, else None."""
        worst = self._worst()
        if worst is None or worst[1] < 2 * self.stall_steps:
            return None
        (agent, key), steps = worst
        return (
            f"training stalled: agent {agent}'s {key} has been 0 for {steps} steps — {_WHY[key]}, so every "
            "advantage is 0 and nothing trains. Check the answer format the prompts ask for "
            "(corl-vl adapters check), grpo.max_new_tokens, or the data; train.stall_steps=0 turns this check off"
        )

    def check(self) -> None:
        """Raise the stop reason, if any."""
        reason = self.stop_reason
        if reason is not None:
            raise CorlError(reason)

    def _worst(self) -> tuple[tuple[str, str], int] | None:
        """The longest streak at or past ``stall_steps``."""
        stalled = [(k, n) for k, n in self.streaks.items() if n >= self.stall_steps]
        return max(stalled, key=lambda item: item[1]) if stalled else None
