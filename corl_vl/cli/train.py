"""``corl-vl train``: run a cohort (Co-RL, or a baseline through the same loop) from a YAML file or presets.

Examples::

    corl-vl train --config configs/demo.yaml
    corl-vl train --pair qwen2.5-vl-3b,internvl3.5-2b --set data.train=data/mmr1 --output-dir runs/pair
    corl-vl train --config configs/demo.yaml --baseline ttrl --output-dir runs/demo-ttrl
    corl-vl train --config configs/demo.yaml --resume          # continue runs/demo from its latest checkpoint
    torchrun --nproc_per_node=2 -m corl_vl train --config configs/demo.yaml \
        --set distributed.deepspeed=configs/deepspeed/zero2.json     # one process (a ZeRO-2 engine) per agent

A launch with more than one process (``WORLD_SIZE`` > 1) places the agents on disjoint rank groups
(:mod:`corl_vl.train.distributed`); one plain process runs every agent in turn, as before.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from corl_vl.config import REWARDS, CohortConfig
from corl_vl.errors import CorlError


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "train",
        help="train a cohort with Co-RL (or a self-rewarding / GT baseline)",
        description="Train a cohort of models with peer rewards (Co-RL), or a baseline through the same loop.",
    )
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--config", metavar="FILE", help="cohort YAML (see configs/)")
    source.add_argument(
        "--pair", metavar="A,B[,C]", help="comma-separated model presets (default hyper-parameters)"
    )
    parser.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
        help="override a config value, e.g. --set grpo.k=8 --set agents.0.lr=2e-6 (repeatable)",
    )  # fmt: skip
    parser.add_argument("--max-steps", type=int, help="override train.max_steps")
    parser.add_argument("--output-dir", metavar="DIR", help="override train.output_dir (the run folder)")
    parser.add_argument(
        "--resume", action="store_true", help="continue the run in the output dir from its latest checkpoint"
    )
    baselines = [r for r in REWARDS if r != "co_rl"]
    parser.add_argument(
        "--baseline", choices=baselines, help="train with this reward instead of Co-RL's peer reward"
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar (logs only)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from corl_vl.config import load_config, pair_config

    overrides = list(args.overrides)
    if args.max_steps is not None:
        overrides.append(f"train.max_steps={args.max_steps}")
    if args.output_dir is not None:
        overrides.append(f"train.output_dir={args.output_dir}")
    if args.baseline is not None:
        overrides.append(f"train.reward={args.baseline}")
    if args.config:
        cfg = load_config(args.config, overrides)
    else:
        from corl_vl.data.recipes import pair_data_defaults

        presets = [p.strip() for p in args.pair.split(",")]
        overrides, choice = pair_data_defaults(presets, overrides)  # data by modality; --set still wins
        if choice:
            print(choice)
        cfg = pair_config(presets, overrides)
    try:
        run_dir = train(cfg, resume=args.resume, progress=not args.no_progress)
    finally:
        import torch.distributed

        if torch.distributed.is_available() and torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()
    print(f"run folder: {run_dir}")
    return 0


def train(
    cfg: CohortConfig,
    *,
    resume: bool = False,
    progress: bool = True,
    device: str | None = None,
    build: Callable[[CohortConfig, str], Any] | None = None,
) -> Path:
    """Run (or resume) a cohort to ``train.max_steps``; returns the run folder.

    ``build(cfg, device)`` makes the cohort (default :meth:`Cohort.from_config`); tests use it to control inputs.

    Saves a checkpoint every ``train.save_every`` steps and always at the end; writes metrics as it goes and
    PNG curves at the end. A run folder that already has checkpoints is only continued with ``resume=True``.
    """
    import time

    import torch

    from corl_vl.train.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
    from corl_vl.train.cohort import Cohort
    from corl_vl.config import save_config
    from corl_vl.train.distributed import launched_world_size, setup
    from corl_vl.train.reporting import RunLogger, plot_run, truncate_metrics

    dist = None
    if launched_world_size() > 1:
        dist = setup(len(cfg.agents), backend=cfg.distributed.backend)
    elif cfg.distributed.deepspeed:
        raise CorlError(
            "distributed.deepspeed is set but this is a single process; launch with torchrun / accelerate launch "
            "(one process group per agent), or drop the setting"
        )
    run_dir = Path(cfg.train.output_dir)
    previous = latest_checkpoint(run_dir)
    if previous is not None and not resume:
        raise CorlError(
            f"{run_dir} already has checkpoints; pass --resume to continue it or pick another --output-dir"
        )
    if resume and previous is None and (run_dir / "agents").exists():
        raise CorlError(f"{run_dir}: --resume, but the run has metrics and no complete checkpoint")
    main = dist is None or dist.is_main
    if main:
        run_dir.mkdir(parents=True, exist_ok=True)
        save_config(cfg, run_dir / "config.yaml")
    torch.manual_seed(cfg.train.seed)
    if device is None and torch.cuda.is_available():
        device = f"cuda:{torch.cuda.current_device()}" if dist is not None else "cuda"
    device = device or "cpu"
    if build is None:
        cohort = Cohort.from_config(cfg, device=device, dist=dist)
    else:  # tests: build(cfg, device) or, distributed, build(cfg, device, dist)
        cohort = build(cfg, device) if dist is None else build(cfg, device, dist)
    start = load_checkpoint(previous, cohort) if (resume and previous is not None) else 0
    # metrics: each agent's group rank 0 writes its agent's files; the progress bar is global rank 0's
    names = [a.name for a in cohort.agents] if dist is None or dist.is_group_leader else []
    truncate_metrics(run_dir, names, start)
    every = cfg.train.save_every
    with RunLogger(
        run_dir, names, total_steps=cfg.train.max_steps, start_step=start, progress=progress and main
    ) as log:
        for step in range(start, cfg.train.max_steps):
            t0 = time.perf_counter()
            metrics = cohort.step()
            log.log(step, metrics, time.perf_counter() - t0)
            done = step + 1
            if every and done % every == 0 and done < cfg.train.max_steps:
                save_checkpoint(run_dir, cohort)
    if start < cfg.train.max_steps or previous is None:
        save_checkpoint(run_dir, cohort)
    if dist is not None:
        dist.barrier()  # every agent's metrics are written before the plots read them
    if cfg.train.plot and main:
        plot_run(run_dir)
    return run_dir
