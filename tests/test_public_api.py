"""The README's Python example runs as written (on the tiny test cohort instead of the hub models)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

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


def test_readme_python_example_runs(tmp_path):
    code = readme_example()
    assert len(code.strip().splitlines()) <= 20
    replacements = {
        "configs/pairs/qwen2.5-vl-3b_internvl3.5-2b.yaml": str(FIXTURE),
        '"train.max_steps=50"': f'"train.max_steps=2", "train.plot=false", "train.output_dir={tmp_path}/run"',
        "limit=64": "limit=2",
        "runs/scripted": str(tmp_path / "scripted"),
    }
    for old, new in replacements.items():
        assert old in code, old
        code = code.replace(old, new)
    script = tmp_path / "readme_example.py"
    script.write_text(code)
    result = subprocess.run(
        [sys.executable, str(script)], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr[-2000:]
    out = result.stdout
    assert out.splitlines()[0].startswith("1 {'qwen':")
    assert "eval/parsed_frac" in out
    assert (tmp_path / "scripted" / "agents" / "qwen" / "metrics.jsonl").exists()
    assert (tmp_path / "scripted" / "checkpoints").is_dir()
