"""math-verify behind a hard, thread-safe time limit: a pool of persistent worker processes.

math-verify's timeouts rely on ``signal.alarm``: they raise outside the main thread and cannot interrupt C-level
big-integer work. So each comparison is sent to a long-lived worker process (started once, ~1 s of imports)
and the caller waits at most ``timeout`` seconds for the verdict; a worker that misses the deadline is killed
and a fresh one replaces it on the next call. Any number of threads may call :func:`check` at once; at most
``max_workers`` workers run (one per core by default), started only when every existing one is busy.

Workers are plain ``subprocess`` children running ``_mv_worker.py`` (not ``multiprocessing``), so they work
from any thread, never re-import the caller's ``__main__``, and inherit nothing from torch or CUDA.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import select
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

_WORKER_SCRIPT = str(Path(__file__).with_name("_mv_worker.py"))
#: Worker start-up (imports + warm-up) may be slow on a loaded machine; it does not count as comparison time.
STARTUP_TIMEOUT_S = 120.0
#: Address-space cap per worker: big enough for sympy, small enough that 10^(10^10) fails fast.
WORKER_MEMORY_BYTES = 3 * 1024**3


class _Worker:
    """One math-verify process and the line protocol to it."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, _WORKER_SCRIPT, str(WORKER_MEMORY_BYTES)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        self._buf = b""
        if self._readline(STARTUP_TIMEOUT_S) != b"ready":
            self.kill()
            raise RuntimeError(f"math-verify worker failed to start ({sys.executable} {_WORKER_SCRIPT})")

    def _readline(self, timeout: float) -> bytes | None:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buf:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
                return None
            chunk = os.read(fd, 65536)
            if not chunk:
                raise EOFError("math-verify worker exited")
            self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\n")
        return line

    def ask(self, gold: str, pred: str, timeout: float) -> bool | None:
        """The verdict, or None when the worker missed the deadline (the caller must kill it)."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps([gold, pred]).encode() + b"\n")
        self.proc.stdin.flush()
        line = self._readline(timeout)
        return None if line is None else line == b"1"

    def ask_extract(self, text: str, timeout: float) -> tuple[bool, str | None]:
        """(answered in time, math-verify's extracted answer or None)."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"extract": text}).encode() + b"\n")
        self.proc.stdin.flush()
        line = self._readline(timeout)
        if line is None:
            return False, None
        found = json.loads(line)
        return True, found if isinstance(found, str) else None

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()


class MathVerifyPool:
    """Up to ``max_workers`` math-verify processes shared by all threads of this process."""

    def __init__(self, max_workers: int | None = None) -> None:
        self.max_workers = max(1, max_workers or os.cpu_count() or 1)
        self._slots = threading.BoundedSemaphore(self.max_workers)
        self._lock = threading.Lock()
        self._idle: list[_Worker] = []
        self._pid = os.getpid()
        self.timeouts = 0  # comparisons that hit the limit (their worker was replaced)

    def check(self, gold: str, pred: str, timeout: float) -> bool | None:
        """math-verify's ``verify(parse(gold), parse(pred))``; None when it did not finish within ``timeout``."""
        return self._run(lambda worker: worker.ask(gold, pred, timeout))

    def extract(self, text: str, timeout: float) -> str | None:
        """math-verify's own answer extraction from free text; None when it finds none or runs out of time."""
        answered = self._run(lambda worker: worker.ask_extract(text, timeout))
        return answered[1] if answered is not None else None

    def _run(self, ask: Callable[[_Worker], Any]) -> Any:
        """Run ``ask(worker)`` on an idle (or new) worker; a missed deadline (``None`` or ``(False, …)``) kills it."""
        with self._slots:
            with self._lock:
                worker = self._idle.pop() if self._idle else None
            if worker is None:
                worker = _Worker()
            verdict = None
            try:
                verdict = ask(worker)
            except (OSError, EOFError, ValueError):
                verdict = None  # the worker died (e.g. killed by the OS); treat like a timeout
            if verdict is None or verdict == (False, None):
                worker.kill()
                with self._lock:
                    self.timeouts += 1
                return None
            with self._lock:
                self._idle.append(worker)
            return verdict

    def warm_up(self, n: int = 1) -> None:
        """Start ``n`` workers now (in parallel) so the first comparisons do not pay for imports."""
        n = min(n, self.max_workers)
        with self._lock:
            missing = n - len(self._idle)
        if missing <= 0:
            return
        started: list[_Worker] = []
        threads = [threading.Thread(target=lambda: started.append(_Worker())) for _ in range(missing)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        with self._lock:
            self._idle.extend(started)

    def close(self) -> None:
        """Stop every idle worker (busy ones are stopped by their caller)."""
        if os.getpid() != self._pid:
            return  # a forked child must not kill its parent's workers
        with self._lock:
            idle, self._idle = self._idle, []
        for worker in idle:
            worker.kill()


_pool: MathVerifyPool | None = None
_pool_lock = threading.Lock()


def get_pool() -> MathVerifyPool:
    """The process-wide pool (re-created after a fork, so a child never talks to its parent's workers)."""
    global _pool
    with _pool_lock:
        if _pool is None or _pool._pid != os.getpid():
            _pool = MathVerifyPool()
        return _pool


def set_max_workers(n: int) -> MathVerifyPool:
    """Resize the process-wide pool (e.g. ``corl-vl grade --workers N``); idle workers are kept if n allows."""
    global _pool
    with _pool_lock:
        old = _pool if _pool is not None and _pool._pid == os.getpid() else None
        _pool = MathVerifyPool(n)
        if old is not None:
            with old._lock:
                keep, rest = old._idle[: _pool.max_workers], old._idle[_pool.max_workers :]
                old._idle = rest
            _pool._idle.extend(keep)
            old.close()
        return _pool


def check(gold: str, pred: str, timeout: float) -> bool | None:
    """Ask math-verify through the process-wide pool; None on timeout."""
    return get_pool().check(gold, pred, timeout)


def extract(text: str, timeout: float) -> str | None:
    """math-verify's answer extraction from free text through the process-wide pool; None if none or late."""
    return get_pool().extract(text, timeout)


@atexit.register
def _shutdown() -> None:
    if _pool is not None:
        _pool.close()
