"""``corl-vl launch`` (per-node torchrun commands, sbatch script), ``corl-vl train``'s decision to start its own
processes on a multi-GPU node (device count injected), and the scale-out config fields."""

from __future__ import annotations

import argparse
import shlex
import subprocess
from pathlib import Path

import pytest

from corl_vl.cli import main
from corl_vl.cli.launch import self_launch_command, self_launch_processes
from corl_vl.cli.train import train_argv
from corl_vl.config import config_from_dict
from corl_vl.errors import CorlError

ROOT = Path(__file__).resolve().parent.parent
ZERO2 = str(ROOT / "configs" / "deepspeed" / "zero2.json")


def _config(tmp_path: Path, gpus: list[int | None], tp: int = 1) -> Path:
    agents = "\n".join(
        f"  - {{name: a{i}, model: tiny-qwen2.5{', gpus: ' + str(g) if g else ''}}}"
        for i, g in enumerate(gpus)
    )
    path = tmp_path / "cohort.yaml"
    path.write_text(
        f"agents:\n{agents}\nreward: {{topology: ring}}\nrollout: {{tensor_parallel_size: {tp}}}\n"
        f"distributed: {{deepspeed: {ZERO2}}}\n"
    )
    return path


def _commands(out: str) -> list[list[str]]:
    return [shlex.split(line) for line in out.splitlines() if line.startswith("torchrun ")]


def test_launch_prints_one_torchrun_per_node_with_the_plan(tmp_path, capsys):
    cfg = _config(tmp_path, [6, 6, 4])
    assert (
        main(
            [
                "launch",
                "--nodes",
                "2",
                "--gpus-per-node",
                "8",
                "--master-addr",
                "n0",
                "--config",
                str(cfg),
                "--set",
                "grpo.k=8",
                "--",
                "--output-dir",
                "/nfs/run",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "a2 spans nodes" in out and "a0: 6 GPU(s), ranks 0-5, node(s) 0" in out
    program = [
        "-m",
        "corl_vl",
        "train",
        "--config",
        str(cfg),
        "--set",
        "grpo.k=8",
        "--output-dir",
        "/nfs/run",
    ]
    assert _commands(out) == [
        [
            "torchrun",
            "--nnodes=2",
            f"--node_rank={n}",
            "--nproc_per_node=8",
            "--master_addr=n0",
            "--master_port=29500",
            *program,
        ]
        for n in (0, 1)
    ]


def test_launch_starts_fewer_processes_where_gpus_are_left_over(tmp_path, capsys):
    assert (
        main(
            ["launch", "--nodes", "2", "--gpus-per-node", "8", "--config", str(_config(tmp_path, [6, 6, 2]))]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert [c[3] for c in _commands(out)] == ["--nproc_per_node=8", "--nproc_per_node=6"]
    assert "leftover: 2 GPU(s) unused (node 1: 2)" in out
    # the ranks of the processes launched (8 + 6): the plan printed is the one they compute at start
    assert "a0: 6 GPU(s), ranks 8-13, node(s) 1" in out


def test_slurm_script_runs_torchrun_once_per_node_with_each_nodes_process_count(tmp_path):
    script = tmp_path / "run.sbatch"
    cfg = _config(tmp_path, [6, 6, 2])
    assert (
        main(
            [
                "launch",
                "--nodes",
                "2",
                "--gpus-per-node",
                "8",
                "--slurm",
                "--write",
                str(script),
                "--config",
                str(cfg),
            ]
        )
        == 0
    )
    text = script.read_text()
    assert "#SBATCH --nodes=2" in text and "#SBATCH --gpus-per-node=8" in text
    assert "n=(8 6)" in text and '--node_rank="$SLURM_NODEID"' in text and "srun --kill-on-bad-exit=1" in text
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0  # valid shell (running it needs SLURM)


def test_launch_refuses_a_node_that_would_run_nothing(tmp_path, capsys):
    assert (
        main(["launch", "--nodes", "3", "--gpus-per-node", "8", "--config", str(_config(tmp_path, [4, 4]))])
        == 2
    )
    assert "node 1 would run no agent" in capsys.readouterr().err


def test_train_starts_one_process_per_agent_on_gpus_and_one_per_gpu_of_each_block_with_deepspeed(tmp_path):
    cfg = config_from_dict(
        {"agents": [{"model": "tiny-qwen2.5"}, {"model": "tiny-llama3"}], "distributed": {"deepspeed": ZERO2}}
    )
    assert self_launch_processes(cfg, 8, {}) == 8  # equal shares of every visible GPU
    with pytest.raises(CorlError, match="2 agents need at least 2 GPUs"):
        self_launch_processes(cfg, 1, {})  # a DeepSpeed block each; without DeepSpeed the pair takes turns
    assert self_launch_processes(cfg, 0, {}) is None  # CPU: this process runs every agent
    assert self_launch_processes(cfg, 8, {"WORLD_SIZE": "8", "LOCAL_RANK": "0"}) is None  # already launched
    cfg.agents[0].gpus, cfg.agents[1].gpus = 3, 2
    assert self_launch_processes(cfg, 8, {}) == 5  # 3 GPUs left over (logged)
    with pytest.raises(CorlError, match="ask for 5 GPUs, the launch has 4"):
        self_launch_processes(cfg, 4, {})
    cfg.distributed.deepspeed = None
    with pytest.raises(CorlError, match=r"agents\.0\.gpus: 3 GPUs for one agent need distributed\.deepspeed"):
        self_launch_processes(cfg, 8, {})  # several GPUs per agent train through DeepSpeed only
    cfg.agents[0].gpus = cfg.agents[1].gpus = None
    assert self_launch_processes(cfg, 8, {}) == 2  # no DeepSpeed file: one GPU per agent, 6 left over
    assert self_launch_processes(cfg, 1, {}) == 2  # still one process per agent, never two engines in one
    cfg.rollout.sleep_between_phases = False
    with pytest.raises(CorlError, match="engine that never sleeps keeps its memory"):
        self_launch_processes(cfg, 1, {})  # taking turns needs the engines to sleep
    solo = config_from_dict({"agents": [{"model": "tiny-qwen2.5"}], "reward": {"name": "ttrl"}})
    assert self_launch_processes(solo, 1, {}) is None  # one agent on one GPU: this process


def test_the_self_launch_reruns_the_same_train_command_under_torchs_launcher():
    args = argparse.Namespace(
        log_level="info",
        library_progress=False,
        config="c.yaml",
        pair=None,
        overrides=["grpo.k=8"],
        max_steps=3,
        output_dir="runs/x",
        baseline=None,
        resume=True,
        no_progress=False,
        allow_unsafe_checkpoint=False,
        skip_plan=True,
        allow_config_change=["train.lr"],
    )
    argv = train_argv(args)
    assert argv == [
        "--log-level",
        "info",
        "train",
        "--config",
        "c.yaml",
        "--set",
        "grpo.k=8",
        "--max-steps",
        "3",
        "--output-dir",
        "runs/x",
        "--resume",
        "--skip-plan",
        "--allow-config-change",
        "train.lr",
    ]
    from corl_vl.cli import build_parser

    again = build_parser().parse_args(argv)  # what the started processes parse: the same namespace
    assert {k: v for k, v in vars(again).items() if k != "func"} == {**vars(args), "command": "train"}
    assert self_launch_command(4, argv, "py")[:5] == [
        "py",
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node=4",
    ]


def test_gpus_and_tensor_parallel_size_are_checked_in_the_config():
    base = {"agents": [{"model": "tiny-qwen2.5", "gpus": 3}, {"model": "tiny-llama3"}]}
    with pytest.raises(CorlError, match=r"agents\.0\.gpus: must be a positive multiple"):
        config_from_dict({**base, "rollout": {"tensor_parallel_size": 2}})
    with pytest.raises(CorlError, match=r"rollout\.tensor_parallel_size: must be ≥ 1"):
        config_from_dict({**base, "rollout": {"tensor_parallel_size": 0}})
    assert config_from_dict(base).agents[0].gpus == 3


def test_vllm_engine_arguments_carry_the_tensor_parallel_size():
    from corl_vl.rollout.vllm_engine import engine_kwargs
    from model_adapters.registry import create_adapter

    adapter = create_adapter("tiny-qwen2.5")
    common = {
        "seed": 0,
        "kv_cache_memory_bytes": 1 << 28,
        "gpu_memory_utilization": 0.4,
        "max_model_len": None,
        "on_gpu": True,
        "sleep_between_phases": True,
    }
    tp = engine_kwargs(adapter, world_size=4, tensor_parallel_size=2, **common)
    assert tp["tensor_parallel_size"] == 2 and tp["distributed_executor_backend"] == "external_launcher"
    assert "tensor_parallel_size" not in engine_kwargs(adapter, world_size=4, **common)
    with pytest.raises(CorlError, match="multiple of it"):
        engine_kwargs(adapter, world_size=3, tensor_parallel_size=2, **common)


def _doc_commands(prefix: str) -> list[list[str]]:
    """The shell commands in docs/scaling.md's code blocks that start with ``prefix`` (continuations joined)."""
    text = (ROOT / "docs" / "scaling.md").read_text().replace("\\\n", " ")
    blocks = text.split("```")[1::2]
    lines = [line.split("#")[0].strip() for block in blocks for line in block.splitlines()]
    return [shlex.split(line) for line in lines if line.startswith(prefix)]


def test_the_launch_commands_in_docs_scaling_print_the_commands_shown_there(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(ROOT)  # the docs' relative config paths
    launches = _doc_commands("corl-vl launch")
    assert len(launches) == 2
    for argv in launches:
        argv = argv[1:]
        if "--write" in argv:
            argv[argv.index("--write") + 1] = str(tmp_path / "pair.sbatch")
        assert main(argv) == 0
    printed = _commands(capsys.readouterr().out)
    shown = _doc_commands("torchrun --nnodes")
    assert len(printed) == len(shown) == 2
    assert printed == shown
    assert "srun" in (tmp_path / "pair.sbatch").read_text()
