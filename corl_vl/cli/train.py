"""``corl-vl train``: run a cohort (Co-RL, or a baseline through the same loop) from a YAML file or presets.

Examples::

    corl-vl train --config configs/demo.yaml
    corl-vl train --pair A,B --output-dir runs/pair   # presets (corl-vl models list); data by modality
    corl-vl train --config configs/demo.yaml --baseline ttrl --output-dir runs/demo-ttrl
    corl-vl train --config configs/demo.yaml --resume          # continue runs/demo from its latest checkpoint
    torchrun --nproc_per_node=2 -m corl_vl train --config configs/demo.yaml \
        --set distributed.deepspeed=configs/deepspeed/zero2.json     # one process (a ZeRO-2 engine) per agent

On GPUs every agent runs in its own process(es) and its own ``torch.distributed`` world, the agents meeting on a
CPU control plane (:mod:`corl_vl.train.distributed`, docs/gpu.md): started without a launcher on a node with
GPUs, ``corl-vl train`` starts one process per agent (or per GPU of each agent's block with
``distributed.deepspeed``) through torch's launcher (``corl_vl.cli.launch.self_launch_processes``); agents that
share a GPU take turns. ``corl-vl launch`` prints the multi-node commands. On the CPU one plain process runs
every agent in turn. The work itself is
:func:`corl_vl.recipe.train`, the one recipe behind every entry point.
"""

from __future__ import annotations

import argparse
import logging
import os
import shlex
import sys
from collections.abc import Callable
from typing import Any

from corl_vl.cli.launch import self_launch_command, self_launch_processes
from corl_vl.data.dataset_recipes import DEFAULT_RECIPE, RECIPES
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
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config value, e.g. --set grpo.k=8 --set agents.0.lr=2e-6 (repeatable)",
    )
    parser.add_argument("--max-steps", type=int, help="override train.max_steps")
    parser.add_argument("--output-dir", metavar="DIR", help="override train.output_dir (the run folder)")
    parser.add_argument(
        "--resume", action="store_true", help="continue the run in the output dir from its latest checkpoint"
    )
    parser.add_argument(
        "--baseline",
        metavar="REWARD",
        help="train with this registered reward instead of Co-RL's peer reward (ttrl, intuitor, rent, empo, gt, "
        "co_rewarding_i, or a plugin's: reward.module or the corl_vl.rewards entry points; sets reward.name)",
    )
    parser.add_argument(
        "--no-progress", action="store_true", help="no progress bar: a plain log line every few steps"
    )
    parser.add_argument(
        "--allow-config-change",
        nargs="+",
        default=[],
        metavar="KEY",
        help="with --resume: accept these changed training settings (e.g. train.lr grpo.k); recorded in "
        "config.yaml's history",
    )
    parser.add_argument(
        "--skip-plan",
        action="store_true",
        help="train even when the memory plan (corl-vl plan, run first on GPUs) says the run does not fit",
    )
    parser.add_argument(
        "--allow-unsafe-checkpoint",
        action="store_true",
        help="with --resume: load an older checkpoint's pickled state even though pickles can run code "
        "(only for checkpoints you made yourself)",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # lazy: cli-help
    from corl_vl.config import apply_overrides, finalize, load_config, pair_config
    from corl_vl.recipe import train
    from corl_vl.train.run_lock import check_config_not_overwritten, release_run_locks

    overrides = list(args.overrides)
    if args.max_steps is not None:
        overrides.append(f"train.max_steps={args.max_steps}")
    if args.output_dir is not None:
        overrides.append(f"train.output_dir={args.output_dir}")
    if args.baseline is not None:
        overrides.append(f"reward.name={args.baseline}")
    if args.config:
        cfg = load_config(args.config, overrides)
    else:
        from corl_vl.experiment import tiny_pair_experiment  # lazy: PIL, cli-help

        presets = [p.strip() for p in args.pair.split(",")]
        overrides, choice = pair_data_defaults(presets, overrides)  # data by modality; --set still wins
        if choice:
            log.info(choice)
        # the tiny pair's experiment section is added once the data is known; --set experiment.* then reaches it
        later = [item for item in overrides if item.strip().startswith("experiment.")]
        cfg = pair_config(presets, [item for item in overrides if item not in later])
        cfg = finalize(apply_overrides(tiny_pair_experiment(cfg), later), "--pair")
    check_config_not_overwritten(args.config, cfg.train.output_dir, resume=args.resume)
    # a process started by a launcher must not touch CUDA before it is placed on its GPU: the launcher planned
    launched = "WORLD_SIZE" in os.environ or "LOCAL_RANK" in os.environ
    gpus = 0 if launched else _visible_gpus()
    if not args.skip_plan and not launched:
        plan_first(cfg, gpus, _gpu_memory)
    # GPUs: one process per agent (or per GPU of each agent's block), started by torch's launcher
    nproc = None if launched else self_launch_processes(cfg, gpus, os.environ)
    if nproc is not None:
        # lazy: torch
        from corl_vl.train.distributed import NODE_GPUS_ENV

        command = self_launch_command(nproc, train_argv(args), sys.executable)
        os.environ[NODE_GPUS_ENV] = str(gpus)  # the processes share the node's GPUs round-robin
        log.info("starting %d processes on this node: %s", nproc, shlex.join(command))
        os.execv(command[0], command)
    try:
        run = train(
            cfg,
            resume=args.resume,
            progress=not args.no_progress,
            allow_config_change=args.allow_config_change,
            allow_unsafe_checkpoint=args.allow_unsafe_checkpoint,
        )
    finally:
        release_run_locks()
        _close_process_group()
    print(f"run folder: {run.run_dir}")
    return 0


def _visible_gpus() -> int:
    # lazy: torch
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def _gpu_memory() -> int:
    """Bytes of the first visible GPU."""
    # lazy: torch
    import torch

    return int(torch.cuda.get_device_properties(0).total_memory)


def plan_first(cfg: Any, gpus: int, gpu_memory: Callable[[], int]) -> None:
    """The memory plan of a run on ``gpus`` GPUs, before any model loads: one line why it does not fit, with the
    first fix, or one log line that it does. On a CPU-only run there is nothing to plan."""
    # lazy: PIL, numpy, tokenizers
    from corl_vl.plan import plan_for_config

    if not gpus:
        log.debug("memory plan: no GPU visible, nothing to plan")
        return
    memory = gpu_memory()
    try:
        plan = plan_for_config(cfg, gpus, memory)
    except CorlError as err:
        raise CorlError(f"{err} (--skip-plan trains without the memory plan)") from None
    if not plan.fits:
        raise CorlError(f"{plan.refusal()}; --skip-plan trains anyway")
    fullest = max(plan.device_peak.values())
    log.info("memory plan: fits, %.1f of %.1f GiB on the fullest GPU", fullest / 2**30, memory / 2**30)


def train_argv(args: argparse.Namespace) -> list[str]:
    """This ``corl-vl train`` invocation as arguments, for the processes it starts itself."""
    argv = [
        "--log-level",
        args.log_level,
        *(["--library-progress"] if args.library_progress else []),
        "train",
    ]
    argv += ["--config", args.config] if args.config else ["--pair", args.pair]
    argv += [x for item in args.overrides for x in ("--set", item)]
    for flag, value in (
        ("--max-steps", args.max_steps),
        ("--output-dir", args.output_dir),
        ("--baseline", args.baseline),
    ):
        argv += [flag, str(value)] if value is not None else []
    for flag, on in (
        ("--resume", args.resume),
        ("--no-progress", args.no_progress),
        ("--allow-unsafe-checkpoint", args.allow_unsafe_checkpoint),
        ("--skip-plan", args.skip_plan),
    ):
        argv += [flag] if on else []
    return argv + (["--allow-config-change", *args.allow_config_change] if args.allow_config_change else [])


def _close_process_group() -> None:
    """End torch.distributed after a multi-process run; vLLM's exit hooks still use the default group of a
    single-process run, so that one is left to them."""
    if "torch" not in sys.modules:  # an error before training must not pay for importing torch
        return
    # lazy: torch
    import torch.distributed

    dist = torch.distributed
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        dist.destroy_process_group()


log = logging.getLogger("corl_vl")


def pair_data_defaults(models: list[str], overrides: list[str]) -> tuple[list[str], str | None]:
    """``overrides`` completed with the data a ``--pair`` cohort trains on, and a line saying what was chosen.

    Real models train on the paper's data for their modality: ``mmr1-math`` when every agent sees images,
    ``math-l3-5`` when any is text-only. Tiny random presets (tests, CPU) default to synthetic visual math and
    16-token rollouts: their answers are a few tokens, and a 512-token budget only makes each step slow. The
    user's own ``--set`` values always win. (Here, not in ``corl_vl.data``: it reads the model presets, and
    ``model_adapters`` imports ``corl_vl.data``.)
    """
    # lazy: PIL, numpy, tokenizers, cli-help
    from model_adapters.presets import all_presets
    from model_adapters.registry import get_adapter_class, resolve_model

    given = {item.partition("=")[0].strip() for item in overrides}
    presets = [all_presets().get(m) for m in models]
    chosen: list[str] = []
    if all(p is not None and p.tiny for p in presets):
        if "grpo.max_new_tokens" not in given:
            chosen.append("grpo.max_new_tokens=16")
        if "train.lr" not in given:  # the demo's: the paper's 1e-6 barely moves a tiny random-width model
            chosen.append("train.lr=2e-4")
        if "data.train" not in given:
            chosen.append("data.train=synthetic")
        note = f"--pair: tiny presets → {', '.join(chosen)} (--set to change)" if chosen else None
        return [*chosen, *overrides], note
    if "data.train" in given:
        return list(overrides), None
    vision = True
    for model, preset in zip(models, presets):
        try:
            name = preset.adapter if preset is not None else resolve_model(model)[0]
        except CorlError:
            continue  # unknown family here: decided by the others (the cohort reports a bad model later)
        vision = vision and get_adapter_class(name).supports_images
    recipe = RECIPES[DEFAULT_RECIPE["vision" if vision else "text"]]
    kind = "every agent sees images" if vision else "a text-only agent"
    note = (
        f"--pair: {kind} → data.train={recipe.name} ({recipe.hub_id}, {recipe.keep_description}); "
        "override with --set data.train=..."
    )
    return [f"data.train={recipe.name}", *overrides], note
