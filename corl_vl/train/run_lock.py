"""One owner per run folder: a lock file (PID, host, start time) that a run takes before it writes anything.

Why: two ``corl-vl train`` on one ``--output-dir`` would interleave their metrics, mix their checkpoints and
leave ``config.yaml`` describing only the later one. The file ``RUN/run.lock`` records who owns the folder; an
exclusive ``flock`` on it is the actual guard, so the kernel frees it when the owner dies, however it dies.

- A second run is refused in one line naming the owner.
- A lock file left by a run that died on this host (its flock is free) is taken over, with a line on stderr.
- A lock recorded by another host is refused even when its flock looks free: flock is not trusted across machines;
  the message says to delete the file if that run is over.
- Within one process the lock is re-entrant (a script or test may train the same folder again); it is released
  by :func:`release_run_locks` (the CLI calls it when the command ends) or at interpreter exit.
- A multi-rank launch takes it once: only the main rank starts the run folder.
"""

from __future__ import annotations

import atexit
import contextlib
import datetime
import errno
import json
import os
import socket
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from corl_vl.errors import CorlError
from corl_vl.io import _writing_error

LOCK_NAME = "run.lock"

try:
    import fcntl
except ImportError:  # Windows: no flock; the recorded PID decides alone
    fcntl = None  # type: ignore[assignment]


@dataclass
class RunLock:
    """A held lock: the open file whose flock guards the folder."""

    path: Path
    fd: int

    def release(self) -> None:
        """Remove the lock file, then drop the flock (in that order: nobody can lock a file about to vanish)."""
        with contextlib.suppress(OSError):
            os.unlink(self.path)
        with contextlib.suppress(OSError):
            os.close(self.fd)


_HELD: dict[Path, RunLock] = {}


def owner_record() -> dict[str, Any]:
    """What the lock file says about this process."""
    now = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)
    return {"pid": os.getpid(), "host": socket.gethostname(), "started": now.isoformat()}


def describe(owner: dict[str, Any]) -> str:
    return f"PID {owner.get('pid', '?')} on {owner.get('host', '?')}, started {owner.get('started', '?')}"


def pid_alive(pid: Any) -> bool:
    """Whether a process with this PID runs on this host (a PID we may not signal still counts as alive)."""
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _read_owner(fd: int) -> dict[str, Any] | None:
    """The recorded owner, or None for an empty file; a damaged one reads as an unknown owner."""
    os.lseek(fd, 0, os.SEEK_SET)
    text = os.read(fd, 4096).decode("utf-8", errors="replace").strip()
    if not text:
        return None
    try:
        owner = json.loads(text)
    except json.JSONDecodeError:
        return {"pid": "?", "host": "?", "started": "?", "damaged": True}
    return owner if isinstance(owner, dict) else {"damaged": True}


def _try_flock(fd: int) -> bool | None:
    """True: locked; False: another open file holds it; None: the file system has no flock."""
    if fcntl is None:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    except OSError as err:
        if err.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            return False
        return None  # ENOLCK / EOPNOTSUPP (some network file systems): fall back to the recorded PID
    return True


def _refuse(run_dir: Path, path: Path, owner: dict[str, Any] | None, why: str) -> CorlError:
    who = describe(owner) if owner else "another run"
    return CorlError(
        f"{run_dir}: in use by another run ({who}){why}; wait for it to end or pick another --output-dir "
        f"(if no run uses this folder, delete {path})"
    )


def acquire_run_lock(run_dir: str | Path) -> RunLock:
    """Take the lock of ``run_dir`` (an existing folder); raises a one-line :class:`CorlError` naming the owner."""
    run_dir = Path(run_dir)
    path = run_dir / LOCK_NAME
    key = path.resolve()
    if key in _HELD:
        return _HELD[key]
    try:
        return _acquire(run_dir, path, key)
    except OSError as err:  # a full, read-only or forbidden folder: one line, and no lock file left behind
        if key not in _HELD:
            with contextlib.suppress(OSError):
                if path.exists() and path.stat().st_size == 0:
                    path.unlink()
        raise _writing_error(path, err, (path,)) from None


def _acquire(run_dir: Path, path: Path, key: Path) -> RunLock:
    host = socket.gethostname()
    for _ in range(10):  # retried when the file was replaced between our open and our flock
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        locked = _try_flock(fd)
        owner = _read_owner(fd)
        if locked is False:
            os.close(fd)
            raise _refuse(run_dir, path, owner, "")
        try:
            same_file = os.fstat(fd).st_ino == os.stat(path).st_ino
        except FileNotFoundError:
            same_file = False
        if not same_file:  # the owner released (unlinked) it while we waited: lock the new file instead
            os.close(fd)
            continue
        if owner is not None and owner.get("pid") != os.getpid():
            if owner.get("damaged"):
                os.close(fd)
                raise _refuse(run_dir, path, None, f"; {path} is not a readable lock record")
            if owner.get("host") != host:
                os.close(fd)
                raise _refuse(run_dir, path, owner, ", a lock from another machine")
            if locked is None and pid_alive(owner.get("pid")):
                os.close(fd)
                raise _refuse(run_dir, path, owner, "")
            print(
                f"{run_dir}: taking over the stale lock of a run that has ended ({describe(owner)})",
                file=sys.stderr,
            )
        try:
            os.ftruncate(fd, 0)
            os.lseek(fd, 0, os.SEEK_SET)
            os.write(fd, (json.dumps(owner_record()) + "\n").encode())
            os.fsync(fd)
        except OSError:
            os.close(fd)  # drops the flock, so the caller may remove the empty file
            raise
        lock = _HELD[key] = RunLock(path, fd)
        return lock
    raise CorlError(f"{path}: the lock file keeps changing under us; is another run starting here?")


def release_run_locks() -> None:
    """Release every run lock this process holds."""
    while _HELD:
        _, lock = _HELD.popitem()
        lock.release()


atexit.register(release_run_locks)


def check_config_not_overwritten(config: str | Path | None, run_dir: str | Path, *, resume: bool) -> None:
    """Refuse ``--config RUN/config.yaml`` for a new run: the run writes its record there, replacing the user's
    file and its comments. On ``--resume`` that file is the run's own record, rewritten as usual."""
    if config is None or resume:
        return
    record = Path(run_dir) / "config.yaml"
    try:
        same = Path(config).resolve() == record.resolve()
    except OSError:
        return
    if same:
        raise CorlError(
            f"--config {config}: this is where the run writes its record (config.yaml in --output-dir "
            f"{run_dir}), so your file would be overwritten; keep your config outside the run folder "
            "or pick another --output-dir"
        )
