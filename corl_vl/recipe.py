"""The one training recipe: ``train(cfg)`` — what ``corl-vl train``, ``corl-vl demo``, the toy reproduction and
the Python API (``corl_vl.train_cohort``; ``corl_vl.train`` is the trainer package) all run.

In order: checks that need no model (settings, data, hub ids, DeepSpeed file), the process layout (one
process, or agents on rank groups), the run folder (refusing one that has checkpoints unless resuming, and only
with the same training settings), the wrapper (an ``experiment:`` section's warm-started bases, synthetic problems
and held-out callback: :class:`corl_vl.experiment.Experiment`), the cohort (:func:`build_cohort`, the one builder), the resume, the loop with its callbacks, the
signal handling (Ctrl-C / SIGTERM end the run after the step with a checkpoint) and the plots.
"""

from __future__ import annotations

import json
import logging
import random
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import yaml

from corl_vl.config import AgentConfig, CohortConfig, to_dict
from corl_vl.errors import CorlError
from corl_vl.io import os_error_line, write_text_atomic
from corl_vl.train.device_placement import placement_for
from corl_vl.train.interrupts import StopOnSignal, StopRequest, resume_command
from corl_vl.train.loop import fit
from corl_vl.train.parts_check import check_trainable
from corl_vl.train.preflight import (
    check_data,
    check_deepspeed,
    check_launch,
    check_models_available,
    check_reporting,
)
from corl_vl.train.reporting import plot_run, truncate_metrics
from corl_vl.train.resume_check import check_resume, read_run_config
from corl_vl.train.run_lock import acquire_run_lock
from corl_vl.train.run_paths import anchor_paths

if TYPE_CHECKING:
    from corl_vl.data.sources import SyntheticScope

log = logging.getLogger("corl_vl")


def build_cohort(
    cfg: CohortConfig,
    *,
    device: str | None = None,
    dist: Any = None,
    problems: Sequence[Any] | None = None,
    placement: Any = None,
    visible_devices: Sequence[str] | None = None,
) -> Any:
    """Every agent this process holds, with its model, optimizer, rollout engine and data view, on ``device``
    (every agent there), else in a distributed run on this rank's GPU (or the CPU), else each on its device of
    ``placement`` (default: placed over ``visible_devices``, by default the GPUs this process sees; agents
    sharing one take turns, :mod:`corl_vl.train.device_placement`). ``problems`` replaces ``cfg.data``'s.

    A config with an ``experiment:`` section must be resolved first (:func:`corl_vl.experiment.resolve`:
    ``train`` does it) so that its agents point at their warm-started bases, and its synthetic problems are
    the experiment's skills only when passed as ``problems`` (``Experiment.scope``; ``train`` does it)."""
    # lazy: PIL, numpy, tokenizers, torch, transformers
    import numpy as np
    import torch

    from corl_vl.train.cohort import Cohort

    # every global RNG, as transformers.set_seed does: a run is the same however the process drew before it
    random.seed(cfg.train.seed)
    np.random.seed(cfg.train.seed)
    torch.manual_seed(cfg.train.seed)
    if dist is not None:  # what a launch supports (train() checked it already; a script may not have)
        check_launch(cfg, dist)
    if device is None and dist is not None:
        device = dist.device  # the GPU pinned for this process (distributed.setup), or the CPU
    if device is None and placement is None:
        placement = placement_for(cfg.agents, visible_devices)
    return Cohort.from_config(
        cfg, device=device or "cpu", dist=dist, problems=problems, placement=None if device else placement
    )


class RunWrapper(Protocol):
    """What wraps the recipe (:class:`corl_vl.experiment.Experiment` is one): ``prepare`` returns the config the
    cohort is built from, ``scope`` names the synthetic problems (training and validation; None: the default
    skills, as pictures) and ``callbacks`` run before the standard ones."""

    scope: SyntheticScope | None

    def prepare(self, cfg: CohortConfig, dist: Any) -> CohortConfig: ...

    def callbacks(self, cfg: CohortConfig, run_dir: Path, dist: Any) -> list[Any]: ...


class NoWrapper:
    """The plain recipe: the config as it is, the default synthetic problems, no extra callbacks."""

    scope: SyntheticScope | None = None

    def prepare(self, cfg: CohortConfig, dist: Any) -> CohortConfig:
        return cfg

    def callbacks(self, cfg: CohortConfig, run_dir: Path, dist: Any) -> list[Any]:
        return []


def train(
    cfg: CohortConfig,
    *,
    resume: bool = False,
    progress: bool = True,
    device: str | None = None,
    callbacks: Sequence[Any] = (),
    prepare: Callable[[Any], None] | None = None,
    allow_config_change: Sequence[str] = (),
    allow_unsafe_checkpoint: bool = False,
    visible_devices: Sequence[str] | None = None,
    wrapper: RunWrapper | None = None,
) -> Any:
    """Run (or resume) a cohort to ``train.max_steps``; returns the :class:`~corl_vl.train.loop.TrainingRun`
    (``run.run_dir`` is the run folder, ``run.evals`` the held-out and validation results).

    ``callbacks`` run after the standard ones; ``prepare(cohort)`` is called once the cohort is built (tests
    use it to control what an engine reports). A run folder that already has checkpoints is only continued
    with ``resume=True`` and the settings it was started with (``allow_config_change`` names keys that may
    differ). Nothing is written to the run folder before every check that needs no model has passed.
    One process places its agents over ``visible_devices`` (default: the GPUs it sees) and logs where.
    ``wrapper`` (default: the config's ``experiment:`` section, :func:`corl_vl.experiment.wrapper_for`) adapts
    the config, the synthetic problems and the callbacks around the recipe.
    """
    # lazy: PIL, numpy, tokenizers, torch
    from corl_vl.experiment import wrapper_for
    from corl_vl.train.checkpoint import RestoreRng, load_checkpoint, rng_state

    wrapper = wrapper or wrapper_for(cfg) or NoWrapper()
    _check_before_models(cfg, resume)
    dist, devices = _process_layout(cfg, device, visible_devices)
    run_dir = Path(cfg.train.output_dir)
    previous = _previous_checkpoint(run_dir, resume, allow_config_change)
    cfg = wrapper.prepare(cfg, dist)
    problems = check_data(cfg, wrapper.scope)
    placement = dist.placement.to_dict() if dist is not None else None
    record = _run_record(cfg, run_dir, previous if resume else None, list(allow_config_change), placement)
    main = dist is None or dist.is_main
    resuming = resume and previous is not None
    if main:
        _start_run_folder(run_dir, None if resuming else record)
    cohort = build_cohort(cfg, device=device, dist=dist, problems=problems, placement=devices)
    if prepare is not None:
        prepare(cohort)
    start = load_checkpoint(previous, cohort, allow_unsafe=allow_unsafe_checkpoint) if resuming else 0
    restore_rng = [RestoreRng(rng_state())] if resuming else []  # the restored state, set again last (below)
    if (
        main and resuming
    ):  # after every refusal (the cohort's, the checkpoint's): a refused resume writes nothing
        _write_run_record(run_dir, record)
    # metrics: each agent's group rank 0 writes its agent's files (the rows past the checkpoint are dropped)
    leader = dist is None or dist.is_group_leader
    truncate_metrics(run_dir, [a.name for a in cohort.agents] if leader else [], start)
    resumed_at_end = previous is not None and start >= cfg.train.max_steps
    hooks = _callbacks(cohort, run_dir, progress, resumed_at_end, dist, wrapper)
    return _fit(
        cohort, [*hooks, *callbacks, *restore_rng], start, run_dir, dist, plot=cfg.train.plot and main
    )


def _check_before_models(cfg: CohortConfig, resume: bool) -> None:
    """The checks that need no model: files, DeepSpeed file, reporting, hub ids, trainable parts, dates."""
    anchor_run_paths(cfg, resume)  # relative files: the run's recorded ones (a resume) or this directory's
    check_deepspeed(cfg.distributed)
    check_reporting(cfg.train.report_to)
    check_models_available(cfg)  # before torch is imported, and before anything reads a hub model's files
    # train.freeze and LoRA from the architecture's names (meta device, no weights)
    check_trainable(cfg.agents, cfg.train.freeze)
    pin_template_dates(cfg)


def _process_layout(
    cfg: CohortConfig, device: str | None, visible_devices: Sequence[str] | None
) -> tuple[Any, Any]:
    """The distributed context of a launch (its rank groups, checked against what a launch supports), else the
    one process's placement of its agents (None when ``device`` puts them all on one device)."""
    # lazy: torch
    from corl_vl.train.distributed import launched_world_size, setup

    dist = None
    if launched_world_size() > 1:
        dist = setup(
            [a.gpus for a in cfg.agents],
            names=cfg.agent_names(),
            tensor_parallel_size=cfg.rollout.tensor_parallel_size,
            backend=cfg.distributed.backend,
        )
        if dist.is_main:
            for line in dist.placement.lines():
                log.info(line)
    check_launch(cfg, dist)  # what this layout supports (train/launch_support.py's table)
    devices = placement_for(cfg.agents, visible_devices) if dist is None and device is None else None
    if devices is not None:  # every agent on the CPU (no GPU) is not news: a debug line
        gpu = devices.shared or any(d != "cpu" for names in devices.devices for d in names)
        for line in devices.lines():
            log.log(logging.INFO if gpu else logging.DEBUG, line)
    return dist, devices


def _previous_checkpoint(run_dir: Path, resume: bool, allow_config_change: Sequence[str]) -> Path | None:
    """The run folder's latest checkpoint, refusing a folder with checkpoints unless resuming (and a resume
    with nothing to resume)."""
    # lazy: PIL, numpy, tokenizers, torch
    from corl_vl.train.checkpoint import latest_checkpoint

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
    return previous


def _callbacks(
    cohort: Any, run_dir: Path, progress: bool, resumed_at_end: bool, dist: Any, wrapper: RunWrapper
) -> list[Any]:
    """The wrapper's callbacks, then the standard ones (validation of the wrapper's synthetic problems)."""
    # lazy: PIL, numpy, rich, tokenizers, torch
    from corl_vl.train.callbacks import standard_callbacks

    hooks = standard_callbacks(
        cohort, run_dir, progress=progress, resumed_at_end=resumed_at_end, dist=dist, scope=wrapper.scope
    )
    return [*wrapper.callbacks(cohort.cfg, run_dir, dist), *hooks]


def _fit(cohort: Any, hooks: list[Any], start: int, run_dir: Path, dist: Any, *, plot: bool) -> Any:
    """The loop under the signal handling (Ctrl-C / SIGTERM: end after this step, save, exit 130 / 143), then
    the plots."""
    # lazy: PIL, numpy, tokenizers, torch
    from corl_vl.train.checkpoint import latest_checkpoint

    with StopRequest(dist) as stop:
        # StopOnSignal last for on_step_end; it has no on_fit_start, so a resume's RestoreRng stays the last one
        run = fit(cohort, [*hooks, StopOnSignal(stop)], start_step=start, run_dir=run_dir)
    if stop.signum is not None:
        again = resume_command()
        raise stop.interrupted(
            f"stopped by {run.stop_reason} after step {run.completed}; checkpoint saved in "
            f"{latest_checkpoint(run_dir)}" + (f". Resume with: {again}" if again else "")
        )
    if dist is not None:
        dist.barrier()  # every agent's metrics are written before the plots read them
    if plot:
        plot_run(run_dir)
    return run


def pin_template_dates(cfg: CohortConfig) -> None:
    """Resolve each agent's template date now, so config.yaml records the date its prompts are rendered with
    (and a resume compares dates, not "default" with "default")."""
    # lazy: PIL, numpy, tokenizers
    from model_adapters.registry import default_template_date

    for agent in cfg.agents:
        if agent.template_date is None:
            agent.template_date = default_template_date(agent.model, adapter=agent.adapter)


def _run_record(
    cfg: CohortConfig, run_dir: Path, previous: Path | None, allow: list[str], placement: dict | None
) -> dict[str, Any]:
    """What ``config.yaml`` will hold: the config and the placement (multi-process runs), and when resuming,
    the checked changes in its history. A resume on another placement is refused: the checkpoint's ZeRO
    partitions and RNG states belong to the saved rank groups, and corl-vl does not re-shard them."""

    current = {**to_dict(cfg), "placement": placement} if placement else to_dict(cfg)
    if previous is None:
        return current
    saved = read_run_config(run_dir / "config.yaml")[0].get("placement")
    if saved != placement:
        raise CorlError(
            f"--resume: {run_dir} was trained on {_layout(saved)}, this launch is {_layout(placement)}; a checkpoint "
            "is not re-sharded onto another world size or placement. Relaunch with the original nodes, processes "
            "and agents[i].gpus (config.yaml's placement), or start a new run with another --output-dir"
        )
    step = json.loads((previous / "meta.json").read_text()).get("step")
    defaults = to_dict(CohortConfig(agents=[AgentConfig() for _ in cfg.agents]))
    return check_resume(
        run_dir / "config.yaml", current, allow=allow, step=step, defaults=defaults, normalize=anchor_paths
    )


def anchor_run_paths(cfg: CohortConfig, resume: bool) -> None:
    """Relative file settings made absolute: on a resume, the files the run's record names (the same relative
    path, written from another directory), else this directory's (:mod:`corl_vl.train.run_paths`)."""
    record = Path(cfg.train.output_dir) / "config.yaml"
    saved = None
    if resume and record.is_file():
        try:
            saved = read_run_config(record)[0]
        except CorlError:
            saved = None  # the resume check reports an unreadable record
    anchor_paths(cfg, saved)


def _layout(placement: dict | None) -> str:
    if not placement:
        return "one process"
    nodes = placement["nodes"]
    agents = ", ".join(f"{name} on ranks {ranks}" for name, ranks in placement["agents"].items())
    return f"{sum(len(n) for n in nodes)} processes on {len(nodes)} node(s) ({agents})"


def _start_run_folder(run_dir: Path, record: dict[str, Any] | None) -> None:
    """Create the run folder (a read-only or full disk fails here, before any model loads), take its lock, and
    for a new run write its record (a resume writes it once its checkpoint has loaded)."""
    if run_dir.exists() and not run_dir.is_dir():
        raise CorlError(f"{run_dir}: is a file; --output-dir must be a folder")
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise CorlError(f"--output-dir {run_dir}: {os_error_line(err) or err}") from None
    acquire_run_lock(run_dir)  # one run per folder: a second one is refused before it writes anything
    if record is not None:
        _write_run_record(run_dir, record)


def _write_run_record(run_dir: Path, record: dict[str, Any]) -> None:
    """Remove what an interrupted save left behind (saying so) and write ``config.yaml`` atomically."""

    # lazy: PIL, numpy, tokenizers, torch
    from corl_vl.train.checkpoint import remove_stale_temps

    for path in remove_stale_temps(run_dir):
        log.warning("removed %s (left by an interrupted checkpoint save)", path)
    write_text_atomic(run_dir / "config.yaml", yaml.safe_dump(record, sort_keys=False))
