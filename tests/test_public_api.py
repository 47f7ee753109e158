"""The README's Python example runs as written (on the tiny test cohort instead of the hub models)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

import corl_vl

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "tests" / "fixtures" / "tiny_cohort.yaml"


def test_all_names_resolve():
    for name in corl_vl.__all__:
        assert getattr(corl_vl, name) is not None, name


def readme_example() -> str:
    text = (ROOT / "README.md").read_text()
    match = re.search(r"## Python API.*?```python\n(.*?)```", text, re.S)
    assert match, "README.md has no Python API example"
    return match.group(1)


@pytest.mark.slow  # > 20 s on the 2-core CI machine
def test_readme_python_example_runs_verbatim_and_trains(tmp_path, demo_bases):
    """Run as written, from a fresh working directory: it trains rows and moves weights (the bases are cached)."""
    code = readme_example()
    assert len(code.strip().splitlines()) <= 20
    probe = (
        "\nimport torch\n"
        "rows = [m['trained_rows'] for ms in run.history.values() for m in ms]\n"
        "print('TRAINED', sum(rows))\n"
        "moved = [any(not torch.equal(p.detach(), b) for p, b in zip(a.model.parameters(), BEFORE[a.name]))"
        " for a in run.cohort.agents]\n"
        "print('MOVED', moved)\n"
    )
    snapshot = (
        "class _Snapshot(corl_vl.Callback):\n"
        "    def on_fit_start(self, run):\n"
        "        BEFORE.update({a.name: [p.detach().clone() for p in a.model.parameters()] for a in run.cohort.agents})\n"
        "BEFORE = {}\n"
    )
    code = code.replace("class PrintRewards", snapshot + "\n\nclass PrintRewards", 1)
    code = code.replace("callbacks=[PrintRewards()]", "callbacks=[_Snapshot(), PrintRewards()]")
    script = tmp_path / "readme_example.py"
    script.write_text(code + probe)
    workdir = tmp_path / "fresh"
    workdir.mkdir()
    result = subprocess.run(
        [sys.executable, str(script)], cwd=workdir, capture_output=True, text=True, check=False, timeout=300
    )
    assert result.returncode == 0, result.stderr[-2000:]
    out = result.stdout
    assert out.splitlines()[0].startswith("1 {'qwen':")
    assert "eval/parsed_frac" in out and "per_skill" in out
    assert float(out.split("TRAINED ")[1].split()[0]) > 0
    assert "MOVED [True, True]" in out
    run = workdir / "runs" / "scripted"
    assert (run / "agents" / "qwen" / "metrics.jsonl").exists() and (run / "checkpoints").is_dir()
    assert (run / "heldout.json").exists()
