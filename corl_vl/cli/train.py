"""``corl-vl train``: run a cohort (Co-RL, or a baseline through the same loop) from a YAML file or presets.

Examples::

    corl-vl train --config configs/demo.yaml
    corl-vl train --pair qwen2.5-vl-3b,internvl3.5-2b --output-dir runs/pair   # data: mmr1-math (by modality)
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

from corl_vl.config import CohortConfig
from corl_vl.errors import CorlError
from corl_vl.rewards.registry import REWARDS


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
    parser.add_argument(
        "--allow-config-change", nargs="+", default=[], metavar="KEY",
        help="with --resume: accept these changed training settings (e.g. train.lr grpo.k); recorded in "
        "config.yaml's history",
    )  # fmt: skip
    parser.add_argument(
        "--allow-unsafe-checkpoint", action="store_true",
        help="with --resume: load an older checkpoint's pickled state even though pickles can run code "
        "(only for checkpoints you made yourself)",
    )  # fmt: skip
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from corl_vl.config import load_config, pair_config
    from corl_vl.train.run_lock import check_config_not_overwritten, release_run_locks

    overrides = list(args.overrides)
    if args.max_steps is not None:
        overrides.append(f"train.max_steps={args.max_steps}")
    if args.output_dir is not None:
        overrides.append(f"train.output_dir={args.output_dir}")
    if args.baseline is not None:
        overrides.append(f"train.reward={args.baseline}")
    build = None
    if args.config and _is_experiment(args.config):
        cfg, build = _experiment(args.config, overrides)
    elif args.config:
        cfg = load_config(args.config, overrides)
    else:
        from corl_vl.data.recipes import pair_data_defaults

        presets = [p.strip() for p in args.pair.split(",")]
        overrides, choice = pair_data_defaults(presets, overrides)  # data by modality; --set still wins
        if choice:
            print(choice)
        cfg = pair_config(presets, overrides)
    check_config_not_overwritten(args.config, cfg.train.output_dir, resume=args.resume)
    try:
        run_dir = train(
            cfg, resume=args.resume, progress=not args.no_progress, build=build,
            allow_config_change=args.allow_config_change, allow_unsafe_checkpoint=args.allow_unsafe_checkpoint,
        )  # fmt: skip
    finally:
        release_run_locks()
        import sys

        if "torch" in sys.modules:  # an error before training must not pay for importing torch
            import torch.distributed

            if torch.distributed.is_available() and torch.distributed.is_initialized():
                torch.distributed.destroy_process_group()
    print(f"run folder: {run_dir}")
    return 0


def _is_experiment(path: str) -> bool:
    """An experiment file (``warm_start:`` + ``cohort:`` sections, :mod:`corl_vl.science.toy`) rather than a
    plain cohort config: its agents start from warm-started bases instead of the named models."""
    import yaml

    from corl_vl.typed_yaml import load_yaml

    try:
        raw = load_yaml(Path(path).read_text(), path)
    except (OSError, yaml.YAMLError):
        return False  # load_config reports the problem
    return isinstance(raw, dict) and "warm_start" in raw and "cohort" in raw


def _experiment(path: str, overrides: list[str]) -> tuple[CohortConfig, Callable[..., Any]]:
    """The cohort of an experiment file, its agents pointed at their warm-started bases (built once, then
    cached — the same ones ``corl-vl demo`` uses), training on the experiment's problems.

    Why: random tiny models never produce a parseable answer, so a cohort of them gets no peer labels and
    trains nothing; warm-started bases answer, disagree where their skills differ, and learn from each other.
    """
    from corl_vl.config import apply_overrides, config_from_dict, finalize
    from corl_vl.science.toy import build_cohort, cohort_config, ensure_bases, load_experiment, train_problems
    from corl_vl.train.distributed import launched_world_size

    exp = load_experiment(path)
    # the settings (and --set) are checked before the warm start spends a minute
    checked = finalize(apply_overrides(config_from_dict(exp.cohort, path), overrides), path)
    if launched_world_size() > 1:
        raise CorlError(f"{path}: experiment files (warm_start + cohort) run in one process; drop torchrun")
    print("warm-starting the bases on labelled problems (cached after the first run) …")
    bases = ensure_bases(exp, log_every=50)
    cfg = cohort_config(exp, bases, reward=checked.train.reward, seed=checked.train.seed, overrides=overrides)
    problems = train_problems(cfg, exp.skills, text_view=exp.text_view)
    if cfg.data.problems_per_step > len(problems):
        raise CorlError(
            f"data.problems_per_step={cfg.data.problems_per_step} but {path} makes {len(problems)} problems"
        )
    return cfg, lambda c, device: build_cohort(c, problems, device)


def pin_template_dates(cfg: CohortConfig) -> None:
    """Resolve each agent's template date now, so config.yaml records the date its prompts are rendered with
    (and a resume compares dates, not "default" with "default")."""
    from model_adapters.registry import default_template_date

    for agent in cfg.agents:
        if agent.template_date is None:
            agent.template_date = default_template_date(agent.model, adapter=agent.adapter)


def train(
    cfg: CohortConfig,
    *,
    resume: bool = False,
    progress: bool = True,
    device: str | None = None,
    build: Callable[[CohortConfig, str], Any] | None = None,
    allow_config_change: list[str] | None = None,
    allow_unsafe_checkpoint: bool = False,
) -> Path:
    """Run (or resume) a cohort to ``train.max_steps``; returns the run folder.

    ``build(cfg, device)`` makes the cohort (default :meth:`Cohort.from_config`); tests use it to control inputs.

    Saves a checkpoint every ``train.save_every`` steps and always at the end; writes metrics as it goes and
    PNG curves at the end. A run folder that already has checkpoints is only continued with ``resume=True``,
    and only with the settings it was started with (:mod:`corl_vl.train.resume_check`; ``allow_config_change``
    names keys that may differ). Everything that can be checked without the models is checked before they load
    (:mod:`corl_vl.train.preflight`), and nothing is written to the run folder before that. SIGINT/SIGTERM end
    the run after the current step with a checkpoint (:mod:`corl_vl.train.interrupts`).
    """
    from corl_vl.train.preflight import check_data, check_deepspeed, check_models_available

    check_deepspeed(cfg)
    check_models_available(cfg)  # before torch is imported, and before anything reads a hub model's files
    pin_template_dates(cfg)

    import torch

    from corl_vl.train.callbacks import standard_callbacks
    from corl_vl.train.checkpoint import latest_checkpoint, load_checkpoint
    from corl_vl.train.cohort import Cohort
    from corl_vl.train.distributed import launched_world_size, setup
    from corl_vl.train.interrupts import StopOnSignal, StopRequest, resume_command
    from corl_vl.train.loop import fit
    from corl_vl.train.reporting import plot_run, truncate_metrics

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
    if allow_config_change and not (resume and previous is not None):
        raise CorlError(
            "--allow-config-change only applies when resuming a run that has a checkpoint (--resume)"
        )
    problems = check_data(cfg) if build is None else None  # a custom builder brings its own problems
    record = _run_record(cfg, run_dir, previous if resume else None, allow_config_change)
    main = dist is None or dist.is_main
    if main:
        _start_run_folder(run_dir, record)
    torch.manual_seed(cfg.train.seed)
    if device is None and torch.cuda.is_available():
        device = f"cuda:{torch.cuda.current_device()}" if dist is not None else "cuda"
    device = device or "cpu"
    if build is None:
        cohort = Cohort.from_config(cfg, device=device, dist=dist, problems=problems)
    else:  # tests: build(cfg, device) or, distributed, build(cfg, device, dist)
        cohort = build(cfg, device) if dist is None else build(cfg, device, dist)
    start = (
        load_checkpoint(previous, cohort, allow_unsafe=allow_unsafe_checkpoint)
        if (resume and previous is not None)
        else 0
    )
    # metrics: each agent's group rank 0 writes its agent's files (the rows past the checkpoint are dropped)
    truncate_metrics(
        run_dir, [a.name for a in cohort.agents] if dist is None or dist.is_group_leader else [], start
    )
    resumed_at_end = previous is not None and start >= cfg.train.max_steps
    callbacks = standard_callbacks(
        cohort, run_dir, progress=progress, resumed_at_end=resumed_at_end, dist=dist
    )
    with StopRequest(dist) as stop:  # Ctrl-C / SIGTERM: end after this step, save, exit 130 / 143
        run = fit(cohort, [*callbacks, StopOnSignal(stop)], start_step=start, run_dir=run_dir)
    if stop.signum is not None:
        again = resume_command()
        raise stop.interrupted(
            f"stopped by {run.stop_reason} after step {run.completed}; checkpoint saved in "
            f"{latest_checkpoint(run_dir)}" + (f". Resume with: {again}" if again else "")
        )
    if dist is not None:
        dist.barrier()  # every agent's metrics are written before the plots read them
    if cfg.train.plot and main:
        plot_run(run_dir)
    return run_dir


def _run_record(
    cfg: CohortConfig, run_dir: Path, previous: Path | None, allow: list[str] | None
) -> dict[str, Any]:
    """What ``config.yaml`` will hold: the config, and when resuming, the checked changes in its history."""
    import json

    from corl_vl.config import AgentConfig, to_dict
    from corl_vl.train.resume_check import check_resume

    current = to_dict(cfg)
    if previous is None:
        return current
    step = json.loads((previous / "meta.json").read_text()).get("step")
    defaults = to_dict(CohortConfig(agents=[AgentConfig() for _ in cfg.agents]))
    return check_resume(run_dir / "config.yaml", current, allow=allow, step=step, defaults=defaults)


def _start_run_folder(run_dir: Path, record: dict[str, Any]) -> None:
    """Create the run folder (a read-only or full disk fails here, before any model loads), remove what an
    interrupted save left behind (saying so), and write ``config.yaml`` atomically."""
    import sys

    import yaml

    from corl_vl.io import os_error_line, write_text_atomic
    from corl_vl.train.checkpoint import remove_stale_temps
    from corl_vl.train.run_lock import acquire_run_lock

    if run_dir.exists() and not run_dir.is_dir():
        raise CorlError(f"{run_dir}: is a file; --output-dir must be a folder")
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise CorlError(f"--output-dir {run_dir}: {os_error_line(err) or err}") from None
    acquire_run_lock(run_dir)  # before anything is written: one run owns the folder (corl_vl.train.run_lock)
    for path in remove_stale_temps(run_dir):
        print(f"removed {path} (left by an interrupted checkpoint save)", file=sys.stderr)
    write_text_atomic(run_dir / "config.yaml", yaml.safe_dump(record, sort_keys=False))
