"""Atomic checkpoints of a whole cohort and exact resume.

Why: a multi-hour cohort run must survive being killed, and "resume" must mean *the same run* — on CPU a run
killed after step k and resumed ends with the same metrics and weights as an uninterrupted one. So a
checkpoint holds everything the next step depends on: each agent's weights (an HF folder, safetensors, plus its
processor, loadable with ``from_pretrained``), optimizer and scheduler state, the sampler position, and the RNG
states. Rollout seeds are derived from (seed, step, agent), never from RNG history.

Nothing in a checkpoint can run code when it is loaded: the training state is safetensors + JSON
(:mod:`corl_vl.train.safe_state`), never a pickle. Checkpoints of older versions (``*.pt``) are read as data only
(``weights_only=True``) and refused if they need more, unless the user passes ``--allow-unsafe-checkpoint``.

Layout (:mod:`corl_vl.checkpoint_layout`)::

    RUN_DIR/checkpoints/step-000010/
        cohort_state.{safetensors,json}   step, sampler, RNG states
        meta.json                  step, agent names, format (written last: a folder without it is not a checkpoint)
        <agent>/                   only what from_pretrained and vLLM load: config.json, model.safetensors,
                                   processor files, corl_prompt.json (the exact chat template and pinned date)
        state/<agent>/             trainer_state.{safetensors,json} (optimizer, scheduler), deepspeed/,
                                   lora/ (an agent's LoRA adapters, peft's format; its <agent>/ is merged)
    RUN_DIR/checkpoints/latest     → the newest complete checkpoint (a directory symlink, so
                                   ``latest/<agent>`` loads with ``from_pretrained`` and ``vllm.LLM``; a text
                                   file with its name where the file system has no symlinks, as in older runs)

Checkpoints of format 2 (state inside ``<agent>/``) and 1 (pickled ``*.pt``) still resume.

Atomicity: everything is written into a hidden temporary folder, then renamed into place; ``latest`` is
replaced with ``os.replace``. A crash mid-save leaves the previous checkpoint untouched, and a hidden
``.step-*.tmp*`` folder that :func:`remove_stale_temps` deletes when the next run starts.

Distributed runs (one agent per process group, :mod:`corl_vl.train.distributed`) write the same layout into a shared
run folder: every rank calls the save at the same step (DeepSpeed's own save has WORLD barriers), each agent's
group rank 0 writes its HF folder, every rank writes its ZeRO partition under ``state/<agent>/deepspeed/`` and its RNG
state under ``rng/``, and global rank 0 writes the cohort state and renames the folder into place after a barrier.
"""

from __future__ import annotations

import json
import os
import random
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import torch

from corl_vl.checkpoint_layout import (  # noqa: F401 (latest_checkpoint … are this module's API too)
    CHECKPOINTS,
    FORMAT,
    agent_state_folder,
    latest_checkpoint,
    point_latest,
    prune_checkpoints,
    read_meta,
    remove_stale_temps,
)
from corl_vl.errors import CorlError
from corl_vl.io import atomic_dir, os_error_line, replace_dir_atomic
from corl_vl.rollout.weights import engine_state_dict
from corl_vl.train.deepspeed_files import check_deepspeed_files
from corl_vl.train.loop import Callback
from corl_vl.train.lora import ADAPTER_FOLDER, has_lora, load_adapters, save_adapters
from corl_vl.train.safe_state import has_state, load_legacy, load_state, save_state
from model_adapters.vllm_layout import apply_to_folder


def save_model_folder(model: Any, folder: Path) -> None:
    """``save_pretrained`` of the model as ``from_pretrained`` and vLLM load it: with LoRA, the merged weights
    under the plain names (the adapters themselves go to the training state)."""
    if has_lora(model):
        model.save_pretrained(folder, safe_serialization=True, state_dict=engine_state_dict(model))
    else:
        model.save_pretrained(folder, safe_serialization=True)


def rng_state() -> dict[str, Any]:
    """Python's, NumPy's, torch's (and CUDA's) global RNG states: what a checkpoint saves per process."""
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore what :func:`rng_state` returned."""
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _normalise_permissions(folder: Path) -> None:
    """Every file of a checkpoint gets the same mode (the user's umask applied to 0666/0777): some writers
    (safetensors) create 0600 files, so a shared checkpoint would otherwise be half unreadable to a group."""
    mask = _umask()
    os.chmod(folder, 0o777 & ~mask)
    for path in folder.rglob("*"):
        if not path.is_symlink():
            os.chmod(path, (0o777 if path.is_dir() else 0o666) & ~mask)


@contextmanager
def _clear_save_errors(target: Path) -> Iterator[None]:
    """A full or read-only disk during a save: one line that says the previous checkpoint is intact."""
    # lazy: safetensors
    from safetensors import SafetensorError

    try:
        yield
    except CorlError as err:  # already one line (corl_vl.io names the folder it could not write)
        raise CorlError(f"saving checkpoint failed: {err}; the previous checkpoint is intact") from None
    except OSError as err:
        line = os_error_line(err)
        if line is None:
            raise
        raise CorlError(
            f"saving checkpoint {target} failed: {line} (the previous checkpoint is intact)"
        ) from None
    except SafetensorError as err:  # the Rust writer's I/O errors (e.g. "No space left on device")
        raise CorlError(
            f"saving checkpoint {target} failed: {str(err).strip()[:200]} (the previous checkpoint is intact)"
        ) from None


def save_checkpoint(run_dir: str | Path, cohort: Any) -> Path:
    """Write a checkpoint of ``cohort`` at its current step; returns its folder."""
    target = Path(run_dir) / CHECKPOINTS / f"step-{cohort.step_index:06d}"
    with _clear_save_errors(target):
        if getattr(cohort, "dist", None) is not None:
            return _save_distributed(Path(run_dir), cohort)
        return _save_single(Path(run_dir), cohort)


def _save_single(run_dir: Path, cohort: Any) -> Path:
    root = Path(run_dir) / CHECKPOINTS
    root.mkdir(parents=True, exist_ok=True)
    name = f"step-{cohort.step_index:06d}"
    final = root / name
    # Re-saving the same step (e.g. the end of a run that just saved) replaces that folder.
    with atomic_dir(final) as tmp:
        tmp.mkdir()
        for agent in cohort.agents:
            folder = tmp / agent.name
            save_model_folder(agent.model, folder)
            # the tensors in the layout vLLM loads (the adapter's vllm_weights hook)
            apply_to_folder(folder, agent.adapter.vllm_weights)
            agent.adapter.processor.save_pretrained(folder)
            # the exact template + pinned date (eval renders the same)
            agent.adapter.save_prompt_record(folder)
            state = agent_state_folder(tmp, agent.name, FORMAT)
            state.mkdir(parents=True)
            save_state(agent.state_dict(), state, "trainer_state")
            if has_lora(agent.model):
                save_adapters(agent.model, state / ADAPTER_FOLDER)
        save_state({"cohort": cohort.state_dict(), "rng": rng_state()}, tmp, "cohort_state")
        meta = {"step": cohort.step_index, "agents": [a.name for a in cohort.agents], "format": FORMAT}
        (tmp / "meta.json").write_text(json.dumps(meta, indent=2))
        _normalise_permissions(tmp)
    point_latest(root, name)
    return final


def _read_state(folder: Path, name: str, allow_unsafe: bool) -> Any:
    """Safetensors + JSON state, or an older checkpoint's ``name.pt`` read as data only."""
    if has_state(folder, name):
        return load_state(folder, name)
    if (folder / f"{name}.pt").exists():
        return load_legacy(folder / f"{name}.pt", allow_unsafe=allow_unsafe)
    raise CorlError(f"{folder}: no {name}.json in this checkpoint (a damaged or partial copy?)")


def _restore(file: Path, restore: Any, state: Any) -> None:
    """``restore(state)``, with state of the wrong shape (keys renamed, another optimizer, edited by hand) as one
    line naming the file instead of torch's KeyError/ValueError from deep inside."""
    try:
        restore(state)
    except (KeyError, ValueError, TypeError, IndexError, AttributeError, RuntimeError) as err:
        what = f"missing key {err}" if isinstance(err, KeyError) else str(err).strip().splitlines()[0][:160]
        raise CorlError(
            f"{file}: does not hold the state this run expects ({type(err).__name__}: {what}); the checkpoint "
            "is damaged or from another config"
        ) from None


def _load_weights(agent: Any, folder: Path) -> None:
    """The agent's model weights from its HF folder; a damaged weights file is one line naming it."""
    # lazy: safetensors
    from safetensors import SafetensorError

    try:
        saved = type(agent.model).from_pretrained(folder, dtype=next(agent.model.parameters()).dtype)
    except (SafetensorError, OSError, ValueError, RuntimeError, EOFError) as err:
        files = sorted(folder.glob("*.safetensors")) or [folder]
        first = str(err).strip().splitlines()[0][:160] if str(err).strip() else type(err).__name__
        raise CorlError(
            f"{files[0] if len(files) == 1 else folder}: the weights cannot be read ({first}); the checkpoint is "
            "damaged (resume from an earlier step, or start again)"
        ) from None
    try:
        missing, unexpected = agent.model.load_state_dict(saved.state_dict(), strict=False)
    except (
        RuntimeError
    ) as err:  # shapes of another model (agents[i].model changed): one line, not torch's list
        lines = [line.strip() for line in str(err).splitlines() if "size mismatch" in line]
        raise CorlError(
            f"{folder}: weights do not match agent {agent.name} ({(lines or [type(err).__name__])[0][:160]}); "
            "the checkpoint is of another model: resume with the run's agents[i].model"
        ) from None
    if missing or unexpected:
        raise CorlError(f"{folder}: weights do not match agent {agent.name} (missing {missing[:3]})")


def _load_agent_weights(agent: Any, path: Path, meta: dict[str, Any]) -> None:
    """Weights from the agent's HF folder, or only its LoRA adapters (the base is the config's, never trained)."""
    if has_lora(agent.model):
        load_adapters(
            agent.model, agent_state_folder(path, agent.name, meta.get("format", 1)) / ADAPTER_FOLDER
        )
    else:
        _load_weights(agent, path / agent.name)


def _state_file(folder: Path, name: str) -> Path:
    """The file a state was read from, for messages (``.json``, or an older checkpoint's ``.pt``)."""
    return folder / f"{name}.json" if has_state(folder, name) else folder / f"{name}.pt"


def _check_cohort_state(path: Path, meta: dict[str, Any], state: Any, *, rng: bool) -> None:
    """``cohort_state`` has the entries a resume reads, and its step is meta.json's (checked before any weights
    load)."""
    file = _state_file(path, "cohort_state")
    for key in ("cohort", "rng") if rng else ("cohort",):
        if not isinstance(state, dict) or not isinstance(state.get(key), dict):
            raise CorlError(f"{file}: no '{key}' entry; the checkpoint is damaged")
    saved = state["cohort"].get("step")
    if saved != meta["step"]:
        raise CorlError(
            f"{path / 'meta.json'}: step {meta['step']} but {file} holds step {saved!r}; the checkpoint is "
            "damaged or was edited (resume from another step)"
        )


def _restore_agent_state(path: Path, meta: dict[str, Any], agent: Any, allow_unsafe: bool) -> Path:
    """The agent's optimizer and scheduler state (from ``state/<agent>/``, or the agent folder in format 1–2);
    returns that folder."""
    folder = agent_state_folder(path, agent.name, meta.get("format", 1))
    state = _read_state(folder, "trainer_state", allow_unsafe)
    _restore(_state_file(folder, "trainer_state"), agent.load_state_dict, state)
    return folder


def load_checkpoint(path: str | Path, cohort: Any, *, allow_unsafe: bool = False) -> int:
    """Restore ``cohort`` (already built from the same config) from ``path``; returns the step to run next.

    Never runs code from the checkpoint; ``allow_unsafe`` (the user's own old checkpoint) lifts that for pickled
    state written by older versions and for DeepSpeed files naming more than tensors and DeepSpeed's own data
    classes (:mod:`corl_vl.train.deepspeed_files`). A damaged checkpoint
    (meta.json, weights or state files) is one :class:`CorlError` line naming the file.
    """
    path = Path(path)
    meta = read_meta(path)
    if getattr(cohort, "dist", None) is not None:
        return _load_distributed(path, meta, cohort, allow_unsafe)
    names = [a.name for a in cohort.agents]
    if meta["agents"] != names:
        raise CorlError(f"{path}: checkpoint has agents {meta['agents']}, the config has {names}")
    state = _read_state(path, "cohort_state", allow_unsafe)
    _check_cohort_state(path, meta, state, rng=True)
    for agent in cohort.agents:
        _load_agent_weights(agent, path, meta)
        _restore_agent_state(path, meta, agent, allow_unsafe)
        agent.sync()
    file = _state_file(path, "cohort_state")
    _restore(file, cohort.load_state_dict, state["cohort"])
    _restore(file, set_rng_state, state["rng"])
    return int(meta["step"])


class RestoreRng(Callback):
    """Sets the resumed RNG state again as the last ``on_fit_start``, right before the first new step.

    Why: anything that draws from a global RNG between the restore and that step (a module first imported then,
    a callback starting) would shift the resumed run off the straight one; the straight run drew nothing there.
    """

    def __init__(self, state: dict[str, Any]) -> None:
        self.state = state

    def on_fit_start(self, run: Any) -> None:
        set_rng_state(self.state)


# ------------------------------------------------------------------------------------------ distributed


def _save_pretrained_here(model: Any, folder: Path) -> None:
    """``save_pretrained`` written by *this* rank.

    Once ``torch.distributed`` is initialised, transformers writes weights and config only on global rank 0
    (``should_save_on_this_rank``) and silently skips every other rank — which would drop every agent but the
    first. Here the caller is its agent's writer, so the model's rank gate is lifted for this one call.
    """
    model.should_save_on_this_rank = lambda is_main_process: is_main_process
    try:
        save_model_folder(model, folder)
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
                apply_to_folder(folder, agent.adapter.vllm_weights)
                agent.adapter.processor.save_pretrained(folder)
                agent.adapter.save_prompt_record(folder)
                state = agent_state_folder(tmp, agent.name, FORMAT)
                state.mkdir(parents=True, exist_ok=True)
                save_state(agent.state_dict(), state, "trainer_state")
                if has_lora(agent.model):  # what a resume loads: the folder above holds the merged weights
                    save_adapters(agent.model, state / ADAPTER_FOLDER)
        agent.backend.save(agent_state_folder(tmp, agent.name, FORMAT) / "deepspeed")
    (tmp / "rng").mkdir(exist_ok=True)
    save_state(rng_state(), tmp / "rng", f"rank-{dist.rank}")
    dist.barrier()
    final = root / name
    if dist.is_main:
        save_state({"cohort": cohort.state_dict(), "world_size": dist.world_size}, tmp, "cohort_state")
        meta = {
            "step": cohort.step_index,
            "agents": cohort.names,
            "world_size": dist.world_size,
            "format": FORMAT,
        }
        (tmp / "meta.json").write_text(json.dumps(meta, indent=2))
        _normalise_permissions(tmp)
        replace_dir_atomic(tmp, final)
        point_latest(root, name)
    dist.barrier()
    return final


def _load_distributed(path: Path, meta: dict[str, Any], cohort: Any, allow_unsafe: bool = False) -> int:
    dist = cohort.dist
    if meta["agents"] != cohort.names or meta.get("world_size") != dist.world_size:
        raise CorlError(
            f"{path}: saved for agents {meta['agents']} on {meta.get('world_size', 1)} processes; "
            f"this launch has {cohort.names} on {dist.world_size}"
        )
    folders = {a.name: agent_state_folder(path, a.name, meta.get("format", 1)) for a in cohort.agents}
    for folder in folders.values():  # every file DeepSpeed will unpickle, before it reads any
        check_deepspeed_files(folder / "deepspeed", allow_unsafe)
    state = _read_state(path, "cohort_state", allow_unsafe)
    _check_cohort_state(path, meta, state, rng=False)  # each rank's RNG state is in rng/
    for agent in cohort.agents:
        agent.backend.load(folders[agent.name] / "deepspeed")  # weights and ZeRO optimizer partitions
        if not agent.backend.loads_weights:  # an agent alone in its world trains with the Torch backend
            _load_agent_weights(agent, path, meta)
        _restore_agent_state(path, meta, agent, allow_unsafe)
        agent.sync()
    _restore(_state_file(path, "cohort_state"), cohort.load_state_dict, state["cohort"])
    rng, name = path / "rng", f"rank-{dist.rank}"
    _restore(_state_file(rng, name), set_rng_state, _read_state(rng, name, allow_unsafe))
    return int(meta["step"])
