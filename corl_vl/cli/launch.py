"""``corl-vl launch``: the exact ``torchrun`` commands (one per node), or a SLURM ``sbatch`` script, for a cohort.

Examples::

    corl-vl launch --nodes 2 --gpus-per-node 8 --master-addr node0 --config configs/demo.yaml
    corl-vl launch --nodes 2 --gpus-per-node 8 --slurm --write run.sbatch --config configs/demo.yaml \\
        --set distributed.deepspeed=configs/deepspeed/zero3.json -- --output-dir /nfs/runs/demo

Why a command and not a launcher of its own: torchrun (and srun around it) is the engine cluster users know; what
corl-vl adds is the placement — how many processes each node runs (a node whose GPUs no agent uses runs fewer,
and the plan says which GPUs are left over) — and the arguments that must agree on every node. The plan printed
here is the one every rank computes at start (:mod:`corl_vl.train.rank_placement`), given the same config.
Also here: the decision of ``corl-vl train`` to start its own processes on one node with several GPUs.
"""

from __future__ import annotations

import argparse
import logging
import shlex
from collections.abc import Mapping, Sequence
from typing import Any

from corl_vl.errors import CorlError
from corl_vl.io import check_output_path, write_text_atomic

log = logging.getLogger("corl_vl")
TRAIN = ["-m", "corl_vl", "train"]


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "launch",
        help="print the torchrun command per node (or write an sbatch script) for a multi-node cohort",
        description="Plan a cohort's placement on N nodes and print the torchrun commands (or a SLURM script) "
        "that run `corl-vl train` there. Arguments after `--` are passed to `corl-vl train`.",
    )
    parser.add_argument("--nodes", type=int, required=True, help="number of nodes")
    parser.add_argument("--gpus-per-node", type=int, required=True, help="GPUs (processes) per node")
    parser.add_argument("--config", metavar="FILE", required=True, help="cohort YAML (see configs/)")
    parser.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE", help="as for train"
    )
    parser.add_argument("--master-addr", default="127.0.0.1", help="node 0's address (not with --slurm)")
    parser.add_argument("--master-port", type=int, default=29500, help="a free TCP port on node 0")
    parser.add_argument(
        "--slurm", action="store_true", help="an sbatch script (srun starts torchrun per node)"
    )
    parser.add_argument("--write", metavar="FILE", help="write the sbatch script (or the commands) to FILE")
    parser.add_argument("train_args", nargs=argparse.REMAINDER, help="-- then more `corl-vl train` arguments")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # lazy: cli-help
    from corl_vl.cli import _launch_checks as checks
    from corl_vl.config import load_config
    from corl_vl.train.rank_placement import gpu_counts, place, simulated_nodes

    extra = args.train_args[1:] if args.train_args[:1] == ["--"] else list(args.train_args)
    checks.check_sizes(args.nodes, args.gpus_per_node, args.master_port)
    given = [("--config", args.config), ("--master-addr", args.master_addr)]
    given += [("--set", o) for o in args.overrides] + [("train arguments after --", x) for x in extra]
    checks.check_script_values(given + ([("--write", args.write)] if args.write else []))
    if args.write:
        checks.check_write_target(args.write, args.config)
        check_output_path(args.write, folder=False, flag="--write")
    cfg = load_config(args.config, list(args.overrides))
    checks.check_script_values([("train.output_dir", str(cfg.train.output_dir))])
    requests, names = [a.gpus for a in cfg.agents], cfg.agent_names()
    tp = cfg.rollout.tensor_parallel_size
    total = args.nodes * args.gpus_per_node
    checks.check_ranks(names, gpu_counts(requests, total, max(tp, 1)), cfg.data.problems_per_step)
    if args.nodes > min(total, sum(r or total for r in requests)):  # O(1): more nodes than ranks to run
        raise CorlError(f"--nodes {args.nodes}: more nodes than the agents' ranks; use fewer nodes")
    options = {"tensor_parallel_size": tp, "names": names}
    hardware = place(requests, simulated_nodes(args.nodes, args.gpus_per_node), **options)
    nproc = hardware.used_per_node()
    if 0 in nproc:
        raise CorlError(f"--nodes {args.nodes}: node {nproc.index(0)} would run no agent; use fewer nodes")
    # the ranks place themselves on the processes actually launched: show that plan, and the idle GPUs
    plan = place(
        requests, [list(range(sum(nproc[:i]), sum(nproc[: i + 1]))) for i in range(len(nproc))], **options
    )
    checks.check_ranks(names, [len(g) for g in plan.groups], cfg.data.problems_per_step)
    program = [*TRAIN, "--config", args.config, *(x for o in args.overrides for x in ("--set", o)), *extra]
    if not cfg.distributed.deepspeed and any(len(ranks) > 1 for ranks in plan.groups):
        log.warning(
            "distributed.deepspeed is not set, but an agent has several ranks: add "
            "--set distributed.deepspeed=configs/deepspeed/zero2.json"
        )
    idle = [hardware.leftover_line()] if hardware.leftover else []
    notes = [f"# {line}" for line in plan.lines() + idle]
    notes.append(
        f"# the run folder ({shlex.quote(str(cfg.train.output_dir))} unless --output-dir) must be shared by every node"
    )
    if args.slurm:
        text = "\n".join(sbatch_script(nproc, args.gpus_per_node, args.master_port, program, notes)) + "\n"
    else:
        commands = [
            shlex.join(torchrun_command(nproc, node, args.master_addr, args.master_port, program))
            for node in range(len(nproc))
        ]
        text = "\n".join([*notes, *(f"# node {i}:\n{c}" for i, c in enumerate(commands))]) + "\n"
    if args.write:
        write_text_atomic(args.write, text)
        print(f"wrote {args.write}")
    else:
        print(text, end="")
    return 0


def torchrun_command(
    nproc: Sequence[int], node: int, master_addr: str, master_port: int, program: Sequence[str]
) -> list[str]:
    """Node ``node``'s torchrun command; ``nproc``: processes per node (node order = global rank order)."""
    return [
        "torchrun",
        f"--nnodes={len(nproc)}",
        f"--node_rank={node}",
        f"--nproc_per_node={nproc[node]}",
        f"--master_addr={master_addr}",
        f"--master_port={master_port}",
        *program,
    ]


def sbatch_script(
    nproc: Sequence[int], gpus_per_node: int, master_port: int, program: Sequence[str], notes: Sequence[str]
) -> list[str]:
    """An sbatch script: one srun task per node, each a torchrun with that node's process count (needs SLURM)."""
    counts = " ".join(str(n) for n in nproc)
    inner = (
        f'n=({counts}); exec torchrun --nnodes="$SLURM_NNODES" --node_rank="$SLURM_NODEID" '
        f'--nproc_per_node="${{n[$SLURM_NODEID]}}" --master_addr="$MASTER_ADDR" --master_port={master_port} '
        + shlex.join(program)
    )
    return [
        "#!/bin/bash",
        "#SBATCH --job-name=corl-vl",
        f"#SBATCH --nodes={len(nproc)}",
        "#SBATCH --ntasks-per-node=1",
        f"#SBATCH --gpus-per-node={gpus_per_node}",
        "#SBATCH --output=corl-vl-%j.out",
        *notes,
        "set -euo pipefail",
        'MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
        "export MASTER_ADDR",
        f"srun --kill-on-bad-exit=1 bash -c {shlex.quote(inner)}",
    ]


def self_launch_processes(cfg: Any, visible_gpus: int, env: Mapping[str, str]) -> int | None:
    """How many processes ``corl-vl train`` starts on this node itself (None: this process runs the cohort).

    On a node with GPUs every agent runs in its own process(es), each agent in its own world
    (:mod:`corl_vl.train.distributed`), laid out by :func:`corl_vl.plan.layout.process_layout` — the layout
    ``corl-vl plan`` prices: without ``distributed.deepspeed`` one process per agent, agent i on GPU i mod G (the
    agents that share a GPU take turns); with it a block of GPUs per agent, one process per GPU. Nothing is
    started when a launcher already did (torchrun variables), without GPUs, or for one process.
    """
    if "WORLD_SIZE" in env or "LOCAL_RANK" in env or visible_gpus < 1:
        return None
    # lazy: PIL, numpy, tokenizers
    from corl_vl.plan.layout import process_layout

    asked = [a.gpus for a in cfg.agents]
    layout = process_layout(len(cfg.agents), visible_gpus, asked, deepspeed=bool(cfg.distributed.deepspeed))
    if len(layout.processes) == 1:
        return None
    if layout.turns and not cfg.rollout.sleep_between_phases:
        raise CorlError(
            f"rollout.sleep_between_phases: false, but agents share a GPU and take turns ({visible_gpus} GPU(s)): "
            "an engine that never sleeps keeps its memory, and the next agent's engine cannot start; set it to "
            "true (the default) or give each agent its own GPU"
        )
    for line in layout.describe(cfg.agent_names()):
        log.info("layout: %s", line)
    return len(layout.processes)


def self_launch_command(nproc: int, train_argv: Sequence[str], python: str) -> list[str]:
    """torch's own launcher, on this node, running ``corl-vl train`` again in ``nproc`` processes."""
    return [
        python,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc_per_node={nproc}",
        "-m",
        "corl_vl",
        *train_argv,
    ]
