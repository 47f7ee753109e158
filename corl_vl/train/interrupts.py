"""Ctrl-C and SIGTERM during training: finish the current step, save, say how to resume, exit 130/143.

Why: a cluster scheduler's SIGTERM or a user's Ctrl-C would otherwise kill the run with a long
``KeyboardInterrupt`` traceback and lose every step since the last checkpoint. The first signal only sets a flag; the training
loop checks it between steps (:meth:`StopRequest.should_stop`), saves a checkpoint and raises
:class:`Interrupted`, which the CLI turns into one line and the conventional exit status (128 + signal). A second
signal means "now": the process exits at once — safe, because every save is atomic and the half-written
temporary folder it may leave is removed when the next run starts.

In a multi-process run every rank must stop after the *same* step (each one saves its share of the checkpoint),
so :meth:`StopRequest.should_stop` agrees across ranks: one rank that got the signal stops them all.
"""

from __future__ import annotations

import os
import shlex
import signal
import sys
import threading
from types import FrameType
from typing import Any

from corl_vl.train.loop import Callback, TrainingRun

_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(Exception):
    """Training stopped on a signal, after saving; ``exit_code`` is 128 + the signal number."""

    def __init__(self, signum: int, message: str) -> None:
        super().__init__(message)
        self.signum = signum
        self.exit_code = 128 + signum


def resume_command(argv: list[str] | None = None) -> str | None:
    """The command line that continues this run: the ``corl-vl train`` command that started it, with
    ``--resume`` (None when the run was started otherwise, e.g. by ``corl-vl demo`` or a script)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if "train" not in args[:1]:
        return None
    if "--resume" not in args:
        args.append("--resume")
    return "corl-vl " + shlex.join(args)


class StopRequest:
    """Installed around the training loop (``with StopRequest() as stop:``); restores the old handlers on exit.

    Signal handlers can only be installed from the main thread; elsewhere (a library caller's worker thread)
    this does nothing and the signals keep their usual behaviour.
    """

    def __init__(self, dist: Any = None, *, stream: Any = None) -> None:
        self.dist = dist
        self.signum: int | None = None
        self.stream = stream
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> StopRequest:
        if threading.current_thread() is threading.main_thread():
            for sig in _SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()

    def _say(self, text: str) -> None:
        if self.stream is not None:
            print(text, file=self.stream, flush=True)
        else:  # straight to fd 2: the handler may interrupt a write to sys.stderr (a reentrant call would raise)
            os.write(2, (text + "\n").encode())

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.signum is not None:
            self._say(f"\n{signal.Signals(signum).name} again: stopping now without saving")
            os._exit(128 + signum)  # no cleanup on purpose: the user asked for "now"; saves are atomic
        self.signum = signum
        self._say(
            f"\n{signal.Signals(signum).name}: finishing this step, then saving a checkpoint "
            "(press Ctrl-C again to stop at once, without saving)"
        )

    def should_stop(self) -> bool:
        """Whether any process of the run got a signal (collective in a distributed run: call on every rank)."""
        if self.dist is None:
            return self.signum is not None
        signals = self.dist.gather_objects(self.signum)
        if self.signum is None:
            self.signum = next((s for s in signals if s is not None), None)
        return self.signum is not None

    def interrupted(self, message: str) -> Interrupted:
        assert self.signum is not None
        return Interrupted(self.signum, message)


class StopOnSignal(Callback):
    """The loop's side of :class:`StopRequest`: after each step, end the run if a signal came (the standard
    checkpoint callback then saves in ``on_fit_end``). Put it last, so the step is fully recorded first."""

    def __init__(self, stop: StopRequest) -> None:
        self.stop = stop

    def on_step_end(self, run: TrainingRun) -> None:
        if self.stop.should_stop():
            run.request_stop(signal.Signals(self.stop.signum).name)
