"""Faults of the second probe (docs/reliability.md, "Round 2"), one test per row; each failed before its fix.

A run folder's owner, non-finite training, config values and names checked before models load, inputs bounded
at load time. Processes that must really be someone else (a lock owner) are real subprocesses.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from test_cohort import TINY, TINY_COHORT

from corl_vl.errors import CorlError
from corl_vl.train.run_lock import LOCK_NAME, acquire_run_lock, release_run_locks

ROOT = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}


def _cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "corl_vl", *args], capture_output=True, text=True, env=ENV, timeout=timeout
    )


def _one_line_exit_2(proc: subprocess.CompletedProcess) -> str:
    """The CLI's refusal: exit 2, no traceback; returns stderr."""
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    return proc.stderr


# ------------------------------------------------------------------------------------------ run folder owner
@pytest.fixture
def holder(tmp_path):
    """Another process that holds the lock of ``tmp_path / 'run'`` until the test ends."""
    run = tmp_path / "run"
    run.mkdir()
    code = (
        "import sys; from corl_vl.train.run_lock import acquire_run_lock; "
        f"acquire_run_lock({str(run)!r}); print('held', flush=True); sys.stdin.read()"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=ENV
    )
    assert proc.stdout.readline().strip() == "held"
    yield run, proc.pid
    proc.stdin.close()
    proc.wait(timeout=30)


def test_second_run_on_a_held_folder_is_refused_naming_the_owner(holder):
    run, pid = holder
    config = run.parent / "cohort.yaml"
    config.write_text(TINY_COHORT.read_text())
    proc = _cli("train", "--config", str(config), "--output-dir", str(run), "--no-progress",
                *(f"--set={o}" for o in TINY), "--max-steps=1")  # fmt: skip
    err = _one_line_exit_2(proc)
    assert f"PID {pid} on {socket.gethostname()}" in err and "in use by another run" in err
    assert sorted(p.name for p in run.iterdir()) == [LOCK_NAME]  # nothing written by the refused run


def test_lock_records_owner_and_is_released(tmp_path):
    lock = acquire_run_lock(tmp_path)
    try:
        record = json.loads((tmp_path / LOCK_NAME).read_text())
        assert record["pid"] == os.getpid() and record["host"] == socket.gethostname() and record["started"]
        assert acquire_run_lock(tmp_path) is lock  # re-entrant within one process
    finally:
        release_run_locks()
    assert not (tmp_path / LOCK_NAME).exists()


def test_stale_lock_of_a_dead_process_is_taken_over_with_a_line(tmp_path, capsys):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = {"pid": dead.pid, "host": socket.gethostname(), "started": "2026-01-01T00:00:00+00:00"}
    (tmp_path / LOCK_NAME).write_text(json.dumps(stale))
    try:
        acquire_run_lock(tmp_path)
        assert json.loads((tmp_path / LOCK_NAME).read_text())["pid"] == os.getpid()
    finally:
        release_run_locks()
    assert (
        f"taking over the lock of a run that is no longer running (PID {dead.pid}" in capsys.readouterr().err
    )


def test_lock_from_another_host_is_refused(tmp_path):
    other = {"pid": 1, "host": socket.gethostname() + "-elsewhere", "started": "2026-01-01T00:00:00+00:00"}
    (tmp_path / LOCK_NAME).write_text(json.dumps(other))
    with pytest.raises(CorlError, match=r"-elsewhere.*another machine.*delete"):
        acquire_run_lock(tmp_path)


def test_config_inside_the_run_folder_is_not_overwritten(tmp_path):
    run = tmp_path / "exp"
    run.mkdir()
    mine = "# my comments\n" + TINY_COHORT.read_text()
    (run / "config.yaml").write_text(mine)
    proc = _cli("train", "--config", str(run / "config.yaml"), "--output-dir", str(run), "--no-progress")
    assert "where the run writes its record" in _one_line_exit_2(proc)
    assert (run / "config.yaml").read_text() == mine
    assert sorted(p.name for p in run.iterdir()) == ["config.yaml"]
