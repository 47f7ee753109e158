"""Atomic checkpoints of a whole cohort and exact resume.

Why: a multi-hour cohort run must survive being killed, and "resume" must mean *the same run* — on CPU a run
killed after step k and resumed ends with the same metrics and weights as an uninterrupted one. So a
checkpoint holds everything the next step depends on: each agent's weights (an HF folder, safetensors, plus its
processor, loadable with ``from_pretrained``), optimizer and scheduler state, the sampler position, and the RNG
states. Rollout seeds are derived from (seed, step, agent), never from RNG history.

Layout::

    RUN_DIR/checkpoints/step-000010/
        cohort_state.pt            step, sampler, RNG states
        meta.json                  step, agent names (written last: a folder without it is not a checkpoint)
        <agent>/                   config.json, model.safetensors, processor files, trainer_state.pt
    RUN_DIR/checkpoints/latest     name of the newest complete checkpoint

Atomicity: everything is written into a hidden temporary folder, then renamed into place; ``latest`` is
replaced with ``os.replace``. A crash mid-save leaves the previous checkpoint untouched.

Distributed runs (one agent per process group, :mod:`corl_vl.train.distributed`) write the same layout into a shared
run folder: every rank calls the save at the same step (DeepSpeed's own save has WORLD barriers), each agent's
group rank 0 writes its HF folder, every rank writes its ZeRO partition under ``<agent>/deepspeed/`` and its RNG
state under ``rng/``, and global rank 0 writes the cohort state and renames the folder into place after a barrier.
"""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch

from corl_vl.errors import CorlError
from corl_vl.io import atomic_dir, replace_dir_atomic, write_text_atomic

CHECKPOINTS = "checkpoints"


def _rng_state() -> dict[str, Any]:
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_checkpoint(run_dir: str | Path, cohort: Any) -> Path:
    """Write a checkpoint of ``cohort`` at its current step; returns its folder."""
    if getattr(cohort, "dist", None) is not None:
        return _save_distributed(Path(run_dir), cohort)
    root = Path(run_dir) / CHECKPOINTS
    root.mkdir(parents=True, exist_ok=True)
    name = f"step-{cohort.step_index:06d}"
    final = root / name
    # Re-saving the same step (e.g. the end of a run that just saved) replaces that folder.
    with atomic_dir(final) as tmp:
        tmp.mkdir()
        for agent in cohort.agents:
            folder = tmp / agent.name
            agent.model.save_pretrained(folder, safe_serialization=True)
            agent.adapter.processor.save_pretrained(folder)
            torch.save(agent.state_dict(), folder / "trainer_state.pt")
        torch.save({"cohort": cohort.state_dict(), "rng": _rng_state()}, tmp / "cohort_state.pt")
        meta = {"step": cohort.step_index, "agents": [a.name for a in cohort.agents]}
        (tmp / "meta.json").write_text(json.dumps(meta, indent=2))
    write_text_atomic(root / "latest", name)
    return final


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    """The newest complete checkpoint of a run, or None."""
    root = Path(run_dir) / CHECKPOINTS
    pointer = root / "latest"
    if pointer.exists():
        path = root / pointer.read_text().strip()
        if (path / "meta.json").exists():
            return path
    done = sorted(p for p in root.glob("step-*") if (p / "meta.json").exists()) if root.exists() else []
    return done[-1] if done else None


def load_checkpoint(path: str | Path, cohort: Any) -> int:
    """Restore ``cohort`` (already built from the same config) from ``path``; returns the step to run next."""
    path = Path(path)
    meta_file = path / "meta.json"
    if not meta_file.exists():
        raise CorlError(f"{path}: not a complete checkpoint (no meta.json)")
    meta = json.loads(meta_file.read_text())
    if getattr(cohort, "dist", None) is not None:
        return _load_distributed(path, meta, cohort)
    names = [a.name for a in cohort.agents]
    if meta["agents"] != names:
        raise CorlError(f"{path}: checkpoint has agents {meta['agents']}, the config has {names}")
    for agent in cohort.agents:
        folder = path / agent.name
        saved = type(agent.model).from_pretrained(folder, dtype=next(agent.model.parameters()).dtype)
        missing, unexpected = agent.model.load_state_dict(saved.state_dict(), strict=False)
        if missing or unexpected:
            raise CorlError(f"{folder}: weights do not match agent {agent.name} (missing {missing[:3]})")
        del saved
        agent.load_state_dict(torch.load(folder / "trainer_state.pt", weights_only=False))
        agent.sync()
    state = torch.load(path / "cohort_state.pt", weights_only=False)
    cohort.load_state_dict(state["cohort"])
    _set_rng_state(state["rng"])
    return int(meta["step"])


# ------------------------------------------------------------------------------------------ distributed


def _save_pretrained_here(model: Any, folder: Path) -> None:
    """``save_pretrained`` written by *this* rank.

    Once ``torch.distributed`` is initialised, transformers writes weights and config only on global rank 0
    (``should_save_on_this_rank``) and silently skips every other rank — which would drop every agent but the
    first. Here the caller is its agent's writer, so the model's rank gate is lifted for this one call.
    """
    model.should_save_on_this_rank = lambda is_main_process: is_main_process
    try:
        model.save_pretrained(folder, safe_serialization=True)
    finally:
        del model.should_save_on_this_rank
    if not (folder / "config.json").exists():
        raise CorlError(f"{folder}: save_pretrained wrote no config.json")


def _save_distributed(run_dir: Path, cohort: Any) -> Path:
    dist = cohort.dist
    root = run_dir / CHECKPOINTS
    name = f"step-{cohort.step_index:06d}"
    tmp = root / f".{name}.tmp"  # one name every rank agrees on without communicating
    if dist.is_main:
        shutil.rmtree(tmp, ignore_errors=True)  # left by a crashed save
        tmp.mkdir(parents=True)
    dist.barrier()
    for agent in cohort.agents:
        folder = tmp / agent.name
        with agent.full_weights():  # ZeRO-3: a gather over the group, so every member enters it
            if dist.is_group_leader:
                _save_pretrained_here(agent.model, folder)
                agent.adapter.processor.save_pretrained(folder)
                torch.save(agent.state_dict(), folder / "trainer_state.pt")
        agent.backend.save(folder / "deepspeed")
    (tmp / "rng").mkdir(exist_ok=True)
    torch.save(_rng_state(), tmp / "rng" / f"rank-{dist.rank}.pt")
    dist.barrier()
    final = root / name
    if dist.is_main:
        torch.save({"cohort": cohort.state_dict(), "world_size": dist.world_size}, tmp / "cohort_state.pt")
        meta = {"step": cohort.step_index, "agents": cohort.names, "world_size": dist.world_size}
        (tmp / "meta.json").write_text(json.dumps(meta, indent=2))
        replace_dir_atomic(tmp, final)
        write_text_atomic(root / "latest", name)
    dist.barrier()
    return final


def _load_distributed(path: Path, meta: dict[str, Any], cohort: Any) -> int:
    dist = cohort.dist
    if meta["agents"] != cohort.names or meta.get("world_size") != dist.world_size:
        raise CorlError(
            f"{path}: saved for agents {meta['agents']} on {meta.get('world_size', 1)} processes; "
            f"this launch has {cohort.names} on {dist.world_size}"
        )
    for agent in cohort.agents:
        folder = path / agent.name
        agent.backend.load(folder / "deepspeed")  # weights and ZeRO optimizer partitions
        agent.load_state_dict(torch.load(folder / "trainer_state.pt", weights_only=False))
        agent.sync()
    state = torch.load(path / "cohort_state.pt", weights_only=False)
    cohort.load_state_dict(state["cohort"])
    _set_rng_state(torch.load(path / "rng" / f"rank-{dist.rank}.pt", weights_only=False))
    return int(meta["step"])
