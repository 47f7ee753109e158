"""Ctrl-C and SIGTERM during `corl-vl train` (docs/reliability.md, "Signals"): the real CLI in a subprocess.

The first signal finishes the step, saves and says how to resume; a second one exits at once without saving.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_cohort import TINY, TINY_COHORT

from corl_vl.train.checkpoint import latest_checkpoint


def _train(out: Path, max_steps: int, *extra: str, launch: tuple[str, ...] = ("-m", "corl_vl")) -> list[str]:
    """The `corl-vl train` command line of the tiny cohort, writing to ``out``."""
    sets = [a for kv in [*TINY, f"train.max_steps={max_steps}"] for a in ("--set", kv)]
    tiny = ["--config", str(TINY_COHORT), "--output-dir", str(out), "--no-progress", *sets]
    return [sys.executable, *launch, "train", *tiny, *extra]


def _start(out: Path, slow_save: bool = False, stderr: object = subprocess.PIPE) -> subprocess.Popen:
    # slow_save: the final checkpoint takes minutes, as on a large model, so a second signal surely lands in it
    launch = ("-c", _SLOW_SAVE_MAIN) if slow_save else ("-m", "corl_vl")
    return subprocess.Popen(_train(out, 200, launch=launch), stdout=subprocess.PIPE, stderr=stderr, text=True)


_SLOW_SAVE_MAIN = """
import sys, time
import corl_vl.train.callbacks as callbacks
from corl_vl.cli import main
save = callbacks.save_checkpoint
callbacks.save_checkpoint = lambda *args: (time.sleep(600), save(*args))[1]
sys.exit(main(sys.argv[1:]))
"""


def _wait_for_a_step(proc: subprocess.Popen, out: Path, timeout: float = 600) -> None:
    metrics = out / "agents" / "qwen" / "metrics.jsonl"
    end = time.monotonic() + timeout
    while not (metrics.exists() and metrics.read_text().strip()):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < end, "no training step within the time limit"
        time.sleep(0.5)


@pytest.mark.slow  # > 20 s on the 2-core CI machine
@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_signal_saves_says_how_to_resume_and_resume_continues(tmp_path, sig, code):
    out = tmp_path / "run"
    proc = _start(out)
    _wait_for_a_step(proc, out)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == code, err
    assert "Traceback" not in err
    ckpt = latest_checkpoint(out)
    assert ckpt is not None and str(ckpt) in err and "Resume with: corl-vl train" in err and "--resume" in err
    stopped_at = json.loads((ckpt / "meta.json").read_text())["step"]
    assert stopped_at >= 1
    if sig != signal.SIGINT:
        return  # both signals reach the same save; the resume after it is checked once
    # a save killed midway left its temporary folder: the next start removes it and says so
    stale = out / "checkpoints" / f".step-{stopped_at + 1:06d}.tmp-dead"
    (stale / "qwen").mkdir(parents=True)
    resumed = subprocess.run(
        _train(out, stopped_at + 1, "--resume"),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert resumed.returncode == 0, resumed.stderr
    assert f"removed {stale}" in resumed.stderr and not stale.exists()
    assert latest_checkpoint(out).name == f"step-{stopped_at + 1:06d}"


@pytest.mark.slow  # > 20 s on the 2-core CI machine
def test_second_sigint_exits_at_once(tmp_path):
    out, err_file = tmp_path / "run", tmp_path / "stderr.txt"
    with err_file.open("w") as err_stream:
        proc = _start(out, slow_save=True, stderr=err_stream)
        _wait_for_a_step(proc, out)
        proc.send_signal(signal.SIGINT)
        # the second signal only after the first one was handled: two signals sent before Python runs its
        # handler would arrive as one
        end = time.monotonic() + 120
        while "finishing this step" not in err_file.read_text():
            assert proc.poll() is None and time.monotonic() < end, err_file.read_text()
            time.sleep(0.1)
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=120)
    err = err_file.read_text()
    assert proc.returncode == 130, err
    assert "again: stopping now" in err and "Traceback" not in err
    assert latest_checkpoint(out) is None  # the save it cut short left no checkpoint
