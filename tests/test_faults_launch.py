"""Issue 45 (round 3): ``corl-vl launch`` never lets a config or command-line value run as shell code, never
overwrites the config it reads, and refuses impossible sizes in one line (exit 2, nothing written).

The generated scripts are run by bash with stand-ins for ``srun``, ``scontrol`` and ``torchrun`` on PATH (fakes of
the cluster tools' rules: srun runs its command once as node 0, torchrun records its argv), so the test sees
exactly which words torchrun would get and that no injected command ran.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from pathlib import Path

import pytest

from corl_vl.cli import main

HOSTILE = "runs/a $(touch PWNED1) `touch PWNED2`; touch PWNED3 && 'q' \"d\" \\ *"

STUBS = {
    "scontrol": "#!/bin/bash\necho node0\n",
    # srun's own options first, then the command: run it once, as node 0 of 1
    "srun": '#!/bin/bash\nwhile [[ "$1" == --* ]]; do shift; done\nSLURM_NNODES=1 SLURM_NODEID=0 exec "$@"\n',
    "torchrun": '#!/bin/bash\nprintf "%s\\0" "$@" > "$ARGV_FILE"\n',
}


def _config(folder: Path, name: str = "cohort.yaml", output_dir: str = "runs/x", pps: int = 8) -> Path:
    path = folder / name
    path.write_text(
        "agents:\n  - {name: a, model: tiny-qwen2.5}\n  - {name: b, model: tiny-qwen2.5}\n"
        f"reward: {{topology: mutual}}\ndata: {{problems_per_step: {pps}}}\n"
        f"train: {{output_dir: {json.dumps(output_dir)}}}\n"  # JSON's escapes are YAML's
    )
    return path


def _stubbed_env(tmp_path: Path) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in STUBS.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "ARGV_FILE": str(tmp_path / "argv")}
    return env | {"SLURM_JOB_NODELIST": "node0"}


def _argv(tmp_path: Path) -> list[str]:
    return (tmp_path / "argv").read_bytes().decode().split("\0")[:-1]


def _no_injection(tmp_path: Path) -> None:
    assert not [p for p in tmp_path.rglob("PWNED*")]


def test_sbatch_script_keeps_hostile_values_inert_and_one_word_each(tmp_path, monkeypatch):
    """$(…), backticks, ';', quotes and globs in the config path, --set and train arguments reach torchrun as
    the same words, and nothing they spell runs."""
    monkeypatch.chdir(tmp_path)
    odd = tmp_path / "odd $(touch PWNED4);`touch PWNED5`"
    odd.mkdir()
    config = _config(odd, output_dir=HOSTILE)
    override = f"train.output_dir={HOSTILE}"
    extra = ["--output-dir", "x; touch PWNED6", "$(touch PWNED7)"]
    argv = ["launch", "--nodes", "1", "--gpus-per-node", "2", "--config", str(config), "--slurm"]
    assert main([*argv, "--set", override, "--write", "run.sbatch", "--", *extra]) == 0
    script = tmp_path / "run.sbatch"
    done = subprocess.run(["bash", str(script)], env=_stubbed_env(tmp_path), capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    program = ["-m", "corl_vl", "train", "--config", str(config), "--set", override, *extra]
    assert _argv(tmp_path)[-len(program) :] == program
    _no_injection(tmp_path)


def test_printed_torchrun_commands_keep_hostile_values_inert(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    config = _config(tmp_path, output_dir=HOSTILE)
    argv = ["launch", "--nodes", "1", "--gpus-per-node", "2", "--config", str(config)]
    assert main([*argv, "--master-addr", "h$(touch PWNED8)", "--", "--output-dir", "`touch PWNED9`"]) == 0
    text = capsys.readouterr().out
    command = next(line for line in text.splitlines() if line.startswith("torchrun "))
    words = shlex.split(command)
    assert "--master_addr=h$(touch PWNED8)" in words and words[-2:] == ["--output-dir", "`touch PWNED9`"]
    done = subprocess.run(["bash", "-c", text], env=_stubbed_env(tmp_path), capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert _argv(tmp_path) == words[1:]
    _no_injection(tmp_path)


# YAML and file names cannot hold NUL, so those two pairs are not cases
_CONTROL_CASES = [
    (char, where)
    for char in ["\n", "\r", "\x00", "\x1b", "\u2028"]
    for where in ["config value", "--set", "train argument", "--master-addr", "--config", "--write"]
    if not (char == "\x00" and where in ("config value", "--config"))
]


@pytest.mark.parametrize(("char", "where"), _CONTROL_CASES)
def test_control_characters_are_refused_naming_the_field(tmp_path, monkeypatch, capsys, char, where):
    monkeypatch.chdir(tmp_path)
    bad = f"runs/x{char}touch PWNED"
    config = _config(tmp_path, output_dir=bad if where == "config value" else "runs/x")
    if where == "--config":
        config = _config(tmp_path, name=f"c{char}touch PWNED.yaml")
    argv = ["launch", "--nodes", "1", "--gpus-per-node", "2", "--config", str(config), "--slurm"]
    argv += {
        "--set": ["--set", f"train.output_dir={bad}"],
        "--master-addr": ["--master-addr", bad],
        "--write": ["--write", f"run{char}.sbatch"],
    }.get(where, [])
    argv += ["--write", "run.sbatch"] if where != "--write" else []
    argv += ["--", "--output-dir", bad] if where == "train argument" else []
    before = sorted(p.name for p in tmp_path.iterdir())
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    named = {"config value": "train.output_dir", "train argument": "train arguments after --"}.get(
        where, where
    )
    assert err.count("\n") == 0 and named in err and "control character" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no script, nothing else


@pytest.mark.parametrize("how", ["same path", "another spelling", "symlink", "hard link"])
def test_write_onto_the_config_it_reads_is_refused(tmp_path, monkeypatch, capsys, how):
    monkeypatch.chdir(tmp_path)
    config = _config(tmp_path)
    original = config.read_text()
    target = {"same path": str(config), "another spelling": "./sub/../cohort.yaml"}.get(how, "run.sbatch")
    (tmp_path / "sub").mkdir()
    if how == "symlink":
        Path(target).symlink_to(config)
    if how == "hard link":
        os.link(config, target)
    argv = ["launch", "--nodes", "1", "--gpus-per-node", "2", "--config", "cohort.yaml", "--slurm"]
    assert main([*argv, "--write", target]) == 2
    err = capsys.readouterr().err
    assert "--write" in err and "config file this launch reads" in err
    assert config.read_text() == original


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--master-port", "0"], "--master-port"),
        (["--master-port", "65536"], "--master-port"),
        (["--master-port=-1"], "--master-port"),
        (["--nodes", "1000000000000"], "--nodes"),  # used to build a list per GPU: hung
        (["--gpus-per-node", "1000000000000"], "--gpus-per-node"),
        (["--nodes", "2000"], "--nodes"),  # beyond the bound: refused before placing
        (["--gpus-per-node", "32"], "data.problems_per_step=8"),  # 16 ranks per agent, 8 problems a step
    ],
)
def test_impossible_launch_sizes_are_refused_in_one_line(tmp_path, monkeypatch, capsys, flags, named):
    monkeypatch.chdir(tmp_path)
    config = _config(tmp_path)
    argv = ["launch", "--nodes", "1", "--gpus-per-node", "2", "--config", str(config), "--write", "out.sh"]
    if "--nodes" in flags:
        argv[argv.index("--gpus-per-node") + 1] = "1"
    assert main([*argv, *flags]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and named in err and "Traceback" not in err
    assert not (tmp_path / "out.sh").exists()


def test_an_agent_with_more_ranks_than_problems_is_refused(tmp_path, capsys):
    config = tmp_path / "c.yaml"
    config.write_text(
        "agents:\n  - {name: big, model: tiny-qwen2.5, gpus: 4}\n  - {name: b, model: tiny-qwen2.5}\n"
        "data: {problems_per_step: 2}\n"
    )
    assert main(["launch", "--nodes", "1", "--gpus-per-node", "6", "--config", str(config)]) == 2
    assert "4 ranks of agent big" in capsys.readouterr().err
