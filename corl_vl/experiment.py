"""A config's optional ``experiment:`` section at run time: warm-started bases and the held-out yardstick.

Why: random tiny models never write a parseable answer, so a cohort of them gets no labels and trains
nothing. An experiment first warm-starts each agent's base on labelled synthetic problems (strong on its own
skills, systematically wrong on the others'; built once, then cached), trains the cohort label-free on
synthetic problems of those skills, and measures greedy held-out accuracy per skill before, during and after.
``corl-vl demo``, ``corl-vl train --config configs/demo.yaml`` and the toy reproduction all run this way.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from corl_vl.config import (
    CohortConfig,
    ExperimentConfig,
    HeldoutConfig,
    apply_overrides,
    config_from_dict,
    finalize,
)
from corl_vl.data.problem import Problem
from corl_vl.data.sources import SyntheticScope
from corl_vl.data.synth import to_text_problem
from corl_vl.eval.greedy import HeldoutResult, heldout_accuracy, heldout_problems
from corl_vl.io import write_text_atomic
from corl_vl.train.loop import Callback, TrainingRun

log = logging.getLogger("corl_vl")


def warm_start_specs(cfg: CohortConfig, **changes: Any) -> list[Any]:
    """One warm-start spec per agent: its ``model`` is the base, strong on its skill set, weak on the rest."""
    # lazy: numpy, tokenizers
    from corl_vl.science.warm_start import complementary_specs

    exp = cfg.experiment
    assert exp is not None
    settings = {k: v for k, v in exp.warm_start.items() if k not in ("skill_sets", "contested_skills")}
    specs = complementary_specs([a.model for a in cfg.agents], exp.skill_sets, **{**settings, **changes})
    contested = tuple(exp.contested_skills)
    specs = [dataclasses.replace(s, weak_skills=(*s.weak_skills, *contested)) for s in specs]
    for i, agent in enumerate(cfg.agents):  # an agent without a skill set: strong on all, with its changes
        own = exp.agents.get(agent.name, {})
        if own or not exp.skill_sets[i]:
            strong = specs[i].strong_skills or tuple(exp.skills)
            weak = specs[i].weak_skills if specs[i].strong_skills else ()
            skills = {"strong_skills": strong, "weak_skills": weak}
            mine = {
                k: tuple(v) if k in skills else v for k, v in own.items()
            }  # its own skills, as the spec's tuples
            specs[i] = dataclasses.replace(specs[i], **{**skills, **settings, **changes, **mine})
    return specs


def ensure_bases(cfg: CohortConfig, *, log_every: int = 50, **changes: Any) -> list[Path]:
    """The warm-started checkpoint of every agent (trained on first use, then read from the cache)."""
    # lazy: numpy, tokenizers
    from corl_vl.science.warm_start import ensure_warm_start

    return [ensure_warm_start(spec, log_every=log_every) for spec in warm_start_specs(cfg, **changes)]


def resolve(cfg: CohortConfig, dist: Any = None) -> CohortConfig:
    """A copy of ``cfg`` whose agents point at their warm-started bases (rank 0 builds them, the others wait
    and read the cache)."""
    sets = "; ".join(
        f"{a.name} strong on {', '.join(g)}" for a, g in zip(cfg.agents, cfg.experiment.skill_sets)
    )
    log.info("warm-starting the bases on labelled problems (%s; cached after the first run) …", sets)
    if dist is None or dist.is_main:
        bases = ensure_bases(cfg)
    if dist is not None:
        dist.barrier()
        bases = ensure_bases(cfg, log_every=0)
    resolved = copy.deepcopy(cfg)
    for agent, base in zip(resolved.agents, bases, strict=True):
        agent.model = str(base)
    return resolved


def heldout_set(cfg: CohortConfig, per_skill: int | None = None) -> list[Problem]:
    """The experiment's held-out problems: ``per_skill`` synthetic test-split problems of each skill."""
    exp = cfg.experiment
    assert exp is not None
    n = per_skill or exp.heldout.per_skill
    return heldout_problems(n, exp.skills, seed=exp.heldout.seed, text_view=exp.text_view)


def evaluate_agents(
    cohort: Any, problems: Sequence[Problem], max_new_tokens: int
) -> dict[str, HeldoutResult]:
    """Each agent's greedy held-out accuracy, on its own view (the text rendering for a text-only model)."""
    results = {}
    for agent in cohort.agents:
        view = problems if agent.adapter.supports_images else [to_text_problem(p) for p in problems]
        with agent.backend.inference_weights():
            results[agent.name] = heldout_accuracy(
                agent.adapter, agent.model, view, max_new_tokens=max_new_tokens
            )
    return results


class HeldoutEval(Callback):
    """Held-out accuracy before the first step, every ``heldout.every`` steps and after the last, into
    ``run.evals`` (``{"step", agent: result}``) and ``RUN_DIR/heldout.json``; never into the training metrics
    (labels are read here for reporting only)."""

    def __init__(self, problems: Sequence[Problem], settings: HeldoutConfig, run_dir: Path | None) -> None:
        self.problems, self.settings = list(problems), settings
        self.path = Path(run_dir) / "heldout.json" if run_dir is not None else None

    def _evaluate(self, run: TrainingRun) -> None:
        results = evaluate_agents(run.cohort, self.problems, self.settings.max_new_tokens)
        run.evals.append({"step": run.completed, **{k: v.as_dict() for k, v in results.items()}})
        for name, r in results.items():
            skills = ", ".join(f"{skill} {value:.2f}" for skill, value in r.per_skill.items())
            log.info("held-out accuracy at step %d: %s %.3f (%s)", run.completed, name, r.overall, skills)
        if self.path is not None:
            write_text_atomic(self.path, json.dumps([e for e in run.evals if "step" in e], indent=1))

    def on_fit_start(self, run: TrainingRun) -> None:
        self._evaluate(run)

    def on_step_end(self, run: TrainingRun) -> None:
        every = self.settings.every
        if (every and run.completed % every == 0) or run.completed == run.max_steps:
            self._evaluate(run)


class Experiment:
    """The experiment as a wrapper around the recipe (:func:`corl_vl.recipe.train` takes it as ``wrapper``; a
    config with an ``experiment:`` section gets one by default): the agents start from their warm-started bases
    (``prepare``), the synthetic training and validation problems are those of its skills in its view
    (``scope``), and the held-out yardstick runs as a callback."""

    def __init__(self, settings: ExperimentConfig) -> None:
        self.settings = settings
        self.scope = SyntheticScope(tuple(settings.skills), settings.text_view)

    def prepare(self, cfg: CohortConfig, dist: Any) -> CohortConfig:
        return resolve(cfg, dist)

    def callbacks(self, cfg: CohortConfig, run_dir: Path, dist: Any) -> list[Callback]:
        """The held-out accuracy callback (before the standard ones), in one process only: a launch's rank
        holds only its own agent."""
        return [HeldoutEval(heldout_set(cfg), self.settings.heldout, run_dir)] if dist is None else []


def wrapper_for(cfg: CohortConfig) -> Experiment | None:
    """The wrapper a config asks for: its ``experiment:`` section's, else none."""
    return Experiment(cfg.experiment) if cfg.experiment is not None else None


# The demo's warm start (configs/demo.yaml has the same values, so both share the cached bases).
PAIR_WARM_START: dict[str, Any] = {
    "skill_sets": [["figure_color"], ["ground_color"]],
    "weak_fraction": 1.0,
    "weak_error_rate": 0.6,
    "labels_per_skill": 1024,
    "text_view": False,
    "steps": 150,
    "batch_size": 16,
    "lr": 1.0e-3,
    "seed": 0,
    "data_seed": 1000,
}


def tiny_pair_experiment(cfg: CohortConfig) -> CohortConfig:
    """``--pair`` of tiny presets: the demo's warm-started bases, so that the first run trains (random tiny
    models never answer); otherwise ``cfg`` unchanged, with one line saying why when the presets are tiny."""
    # lazy: numpy, tokenizers
    from model_adapters.presets import all_presets
    from model_adapters.registry import get_adapter_class

    presets = [all_presets().get(a.model) for a in cfg.agents]
    if not all(p is not None and p.tiny for p in presets) or cfg.experiment is not None:
        return cfg
    if cfg.data.train != "synthetic":
        log.warning(
            "--pair: tiny presets on %s start from random weights (the warm-started bases are for synthetic data): "
            "expect no parseable answers, so nothing trains",
            cfg.data.train,
        )
        return cfg
    if len(cfg.agents) != 2:
        log.warning(
            "--pair: the warm-started bases exist for pairs of tiny presets, not %d agents; these random models "
            "will not answer, so nothing trains (see `corl-vl demo` and configs/science/toy3_collapsed.yaml)",
            len(cfg.agents),
        )
        return cfg

    pictures = all(get_adapter_class(p.adapter).supports_images for p in presets if p is not None)
    warm = {**PAIR_WARM_START, "text_view": not pictures}
    log.info(
        "--pair: tiny presets start from warm-started bases (the demo's recipe; cached after the first run)"
    )
    cfg.experiment = ExperimentConfig(warm_start=warm)
    return finalize(cfg, "--pair")


def demo_config(overrides: Sequence[str] = ()) -> CohortConfig:
    """The demo's cohort (``configs/demo.yaml`` holds the same settings): two tiny VLMs of different families
    (``model_adapters.presets.DEMO_PAIR``) from warm-started bases, 20 label-free Co-RL steps on synthetic
    pictures, on CPU."""
    # lazy: numpy, tokenizers
    from model_adapters.presets import DEMO_PAIR

    raw = {
        "experiment": {"warm_start": PAIR_WARM_START, "heldout": {"per_skill": 32, "max_new_tokens": 8}},
        "agents": [
            *({"name": name, "model": preset} for name, preset in DEMO_PAIR),
        ],
        "reward": {"topology": "mutual"},
        "data": {"train": "synthetic", "limit": 512, "problems_per_step": 8, "seed": 0},
        "grpo": {"k": 8, "max_new_tokens": 8, "temperature": 1.0, "beta": 1.0, "micro_batch_size": 32},
        "rollout": {"engine": "hf", "batch_size": 64},
        "train": {
            "max_steps": 20,
            "lr": 5.0e-5,
            "warmup_ratio": 0.1,
            "save_every": 10,
            "output_dir": "runs/demo-train",
        },
    }
    cfg = config_from_dict(copy.deepcopy(raw), "corl_vl.demo_config")
    return finalize(apply_overrides(cfg, list(overrides)), "corl_vl.demo_config")
