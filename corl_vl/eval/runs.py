"""Evaluating a finished run: ``corl-vl eval --model RUN_DIR`` means every agent of the run at a checkpoint.

A run folder (``corl-vl train`` output: ``config.yaml``, ``checkpoints/step-*/<agent>/``) is expanded into one
model per agent at its latest checkpoint (or ``--step N``), labelled ``<agent>-step<N>``. With
``--baseline-models`` each agent's base model (its ``model`` in the run's ``config.yaml``) is evaluated too and
placed next to it (``<agent>-base``), so the report shows what training changed, agent by agent.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import yaml

from corl_vl.checkpoint_layout import latest_checkpoint, read_meta
from corl_vl.errors import CorlError
from corl_vl.typed_yaml import load_yaml

__all__ = ["EvalModels", "expand_models", "is_run_dir"]


@dataclass
class EvalModels:
    """The models to evaluate, their report labels, and where a run's results go by default."""

    models: list[str] = field(default_factory=list)
    labels: list[str] = field(default_factory=list)
    default_output_dir: Path | None = None


def is_run_dir(path: str | Path) -> bool:
    """A training run folder (has ``checkpoints/``), as opposed to a model folder or preset."""
    return (Path(path) / "checkpoints").is_dir()


def _checkpoint(run: Path, step: int | None) -> Path:
    root = run / "checkpoints"
    saved = sorted(p.name for p in root.glob("step-*") if (p / "meta.json").exists())
    if step is None:
        found = latest_checkpoint(run)
        if found is None:
            raise CorlError(f"{run}: the run has no complete checkpoint yet (nothing in {root})")
        return found
    folder = root / f"step-{step:06d}"
    if not (folder / "meta.json").exists():
        listed = ", ".join(str(int(name.split("-")[1])) for name in saved) or "none"
        raise CorlError(f"{run}: no complete checkpoint at --step {step} (saved steps: {listed})")
    return folder


def _base_models(run: Path) -> dict[str, str]:
    """Agent name → the ``model`` it started from, read from the run's ``config.yaml``."""

    path = run / "config.yaml"
    if not path.is_file():
        raise CorlError(
            f"{path}: missing, so the base models of the run are unknown (drop --baseline-models)"
        )
    try:
        agents = (load_yaml(path.read_text(), str(path)) or {}).get("agents") or []
    except yaml.YAMLError as err:
        raise CorlError(f"{path}: invalid YAML ({getattr(err, 'problem', err)})") from None
    return {str(a.get("name")): str(a.get("model")) for a in agents if isinstance(a, dict)}


def expand_models(
    values: list[str], *, step: int | None = None, baselines: bool = False, labels: list[str] | None = None
) -> EvalModels:
    """``--model`` values with run folders replaced by their agents (and, with ``baselines``, base models).

    Args:
        values: presets, model folders, hub ids or run folders, in the user's order.
        step: the checkpoint step of every run (default: each run's latest).
        baselines: also evaluate each run agent's base model, next to the agent.
        labels: report labels of the plain models (default: their names).
    """
    out = EvalModels()
    plain = iter(labels or values)
    runs = [v for v in values if is_run_dir(v)]
    if step is not None and not runs:
        raise CorlError("--step picks a checkpoint of a run folder, but no --model is a run folder")
    if baselines and not runs:
        raise CorlError(
            "--baseline-models compares a run's agents with their base models; give --model RUN_DIR"
        )
    for value in values:
        if not is_run_dir(value):
            out.models.append(value)
            out.labels.append(next(plain))
            continue
        next(plain)
        run = Path(value)
        ckpt = _checkpoint(run, step)
        agents = read_meta(ckpt)["agents"]  # names checked before they become paths
        bases = _base_models(run) if baselines else {}
        prefix = f"{run.name}-" if len(runs) > 1 else ""  # several runs: keep their agents apart
        number = int(ckpt.name.split("-")[1])
        for agent in agents:
            if baselines:
                if agent not in bases:
                    raise CorlError(
                        f"{run / 'config.yaml'}: no agent {agent!r}, so its base model is unknown"
                    )
                out.models.append(bases[agent])
                out.labels.append(f"{prefix}{agent}-base")
            out.models.append(str(ckpt / agent))
            out.labels.append(f"{prefix}{agent}-step{number}")
        if out.default_output_dir is None:
            out.default_output_dir = run / "eval" / ckpt.name
    if len(set(out.labels)) != len(out.labels):
        raise CorlError(f"--model: two models would share a report label ({', '.join(out.labels)})")
    return out
