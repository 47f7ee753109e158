"""Peak resident memory of this process above a baseline, for CPU memory benchmarks.

Why not ``tracemalloc`` or ``torch.cuda``-style counters: torch's CPU allocations bypass Python's allocator, and
large ones are ``mmap``-ed and returned to the OS when freed, so the kernel's resident-set high-water mark
(``VmHWM``) is the one honest peak. Writing ``5`` to ``/proc/self/clear_refs`` resets that mark to the current
resident size, so ``peak - baseline`` is what the measured code added at its worst moment. Run every point in a
fresh process: a previous point's freed-but-cached pages would otherwise hide in the baseline.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

_STATUS = Path("/proc/self/status")


def _status_kib(field: str) -> int:
    match = re.search(rf"^{field}:\s+(\d+) kB", _STATUS.read_text(), re.MULTILINE)
    if match is None:
        raise RuntimeError(f"/proc/self/status has no {field} (Linux only)")
    return int(match.group(1))


def rss_bytes() -> int:
    """Current resident set size."""
    return _status_kib("VmRSS") * 1024


def reset_peak() -> int:
    """Reset the high-water mark to the current resident size; returns that size (the baseline)."""
    Path("/proc/self/clear_refs").write_text("5")
    return rss_bytes()


def peak_bytes() -> int:
    """Resident high-water mark since the last :func:`reset_peak`."""
    return _status_kib("VmHWM") * 1024


def run_points(script: str, points: Iterable[Sequence[Any]]) -> list[dict[str, Any]]:
    """Each point measured by ``script --one POINT…`` in a fresh process (see the module docstring); the last
    line it prints is the point's JSON result, echoed here as it arrives."""
    root = Path(script).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": f"{root}{os.pathsep}{Path(script).resolve().parent}"}
    rows = []
    for point in points:
        out = subprocess.run(
            [sys.executable, script, "--one", *map(str, point)],
            env=env,
            check=True,
            capture_output=True,
            text=True,
        )
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
        print(json.dumps(rows[-1]), flush=True)
    return rows
