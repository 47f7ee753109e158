"""The toy-scale Co-RL experiment shared by ``corl-vl demo`` and ``benchmarks/science/toy_reproduction.py``.

Why one module: the demo is the toy reproduction in miniature (one seed, Co-RL only), and both must start from
the *same* warm-started bases, train on the same problems and be judged by the same held-out yardstick, or the
demo would show something the benchmark never measured.

An experiment YAML has three sections::

    warm_start:   skill_sets (one list per agent: its strong skills) + WarmStartSpec fields shared by all
    cohort:       a normal cohort config (corl_vl.config); agents' ``model`` names the *base* preset
    heldout:      per_skill, seed, max_new_tokens, every (evaluate every N steps; 0 → before/after only)

``warm_start.text_view`` decides, for the warm start, the RL problems and the held-out set alike, whether the
problems are pictures or their text rendering (the picture described in words). The shipped experiment uses
pictures, with two skills the tiny VLMs were measured to read from pixels in the warm-start budget
(benchmarks/science/README.md lists the skills that passed and failed); the text rendering is an ablation.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from corl_vl.config import CohortConfig, apply_overrides, config_from_dict
from corl_vl.data.problem import Problem
from corl_vl.errors import CorlError
from corl_vl.science.heldout import HeldoutResult, evaluate, heldout_problems
from corl_vl.science.warm_start import WarmStartSpec, complementary_specs, ensure_warm_start
from corl_vl.train.callbacks import StepHook
from corl_vl.train.loop import Callback, fit
from corl_vl.train.validation import PeriodicEval
from corl_vl.typed_yaml import load_yaml


@dataclass
class Experiment:
    """A parsed experiment file (see the module docstring)."""

    cohort: dict[str, Any]
    skill_sets: list[list[str]]
    warm_start: dict[str, Any] = field(default_factory=dict)
    heldout: dict[str, Any] = field(default_factory=dict)
    source: str = "<dict>"

    @property
    def skills(self) -> list[str]:
        return [s for group in self.skill_sets for s in group]

    @property
    def text_view(self) -> bool:
        """Whether problems are shown as text (the picture in words) rather than as pictures — one choice for
        the warm start, the RL problems and the held-out set alike."""
        return bool(self.warm_start.get("text_view", True))


def load_experiment(path: str | Path) -> Experiment:
    path = Path(path)
    try:
        raw = load_yaml(path.read_text(), str(path))
    except FileNotFoundError:
        raise CorlError(f"experiment file not found: {path}") from None
    if not isinstance(raw, dict) or set(raw) - {"warm_start", "cohort", "heldout"}:
        raise CorlError(f"{path}: expected the sections warm_start, cohort, heldout")
    ws = dict(raw.get("warm_start") or {})
    sets = ws.pop("skill_sets", None)
    if not sets or not all(isinstance(g, list) and g for g in sets):
        raise CorlError(f"{path}: warm_start.skill_sets must be one non-empty list of skills per agent")
    known = set(WarmStartSpec.__dataclass_fields__) - {"model", "strong_skills", "weak_skills"}
    unknown = sorted(set(ws) - known)
    if unknown:
        raise CorlError(f"{path}: unknown warm_start key '{unknown[0]}'; known: {', '.join(sorted(known))}")
    exp = Experiment(
        cohort=raw.get("cohort") or {}, skill_sets=sets, warm_start=ws, heldout=raw.get("heldout") or {},
        source=str(path),
    )  # fmt: skip
    if len(exp.cohort.get("agents", [])) != len(sets):
        raise CorlError(f"{path}: {len(sets)} skill sets for {len(exp.cohort.get('agents', []))} agents")
    return exp


def base_specs(exp: Experiment, **changes: Any) -> list[WarmStartSpec]:
    models = [a["model"] for a in exp.cohort["agents"]]
    return complementary_specs(models, exp.skill_sets, **{**exp.warm_start, **changes})


def ensure_bases(exp: Experiment, *, log_every: int = 0, **changes: Any) -> list[Path]:
    """The warm-started checkpoint of every agent (built on first use, then cached)."""
    return [ensure_warm_start(spec, log_every=log_every) for spec in base_specs(exp, **changes)]


def cohort_config(
    exp: Experiment,
    bases: Sequence[Path],
    *,
    reward: str = "co_rl",
    seed: int = 0,
    overrides: Sequence[str] = (),
) -> CohortConfig:
    """The experiment's cohort config, agents pointed at their warm-started bases, with ``reward`` and ``seed``."""
    raw = yaml.safe_load(yaml.safe_dump(exp.cohort))  # deep copy
    for agent, base in zip(raw["agents"], bases, strict=True):
        agent["model"] = str(base)
    raw.setdefault("train", {})
    raw["train"]["reward"] = reward
    raw["train"]["seed"] = seed
    cfg = config_from_dict(raw, exp.source)
    return apply_overrides(cfg, list(overrides))


def train_problems(cfg: CohortConfig, skills: Sequence[str], *, text_view: bool = True) -> list[Problem]:
    """The label-hidden training problems every agent is asked about, by id (pictures, or their text
    rendering when ``text_view``)."""
    from corl_vl.data.synth import generate_problems, to_text_problem

    if cfg.data.train != "synthetic":
        raise CorlError("the toy experiment trains on synthetic problems (data.train: synthetic)")
    n = cfg.data.limit or 256
    problems = generate_problems(n, seed=cfg.data.seed, split="train", skills=skills)
    return [to_text_problem(p) for p in problems] if text_view else problems


def heldout_set(exp: Experiment, per_skill: int | None = None) -> list[Problem]:
    h = exp.heldout
    n = per_skill or int(h.get("per_skill", 64))
    return heldout_problems(n, exp.skills, seed=int(h.get("seed", 0)), text_view=exp.text_view)


def build_cohort(cfg: CohortConfig, problems: Sequence[Problem], device: str = "cpu") -> Any:
    """A :class:`~corl_vl.train.cohort.Cohort` whose agents all see ``problems`` (the text rendering)."""
    from corl_vl.train.agent import Agent
    from corl_vl.train.cohort import Cohort

    agents = [Agent.from_config(a, cfg, problems, device=device) for a in cfg.agents]
    return Cohort(cfg, agents, problems)


def evaluate_cohort(
    cohort: Any, heldout: Sequence[Problem], max_new_tokens: int = 10
) -> dict[str, HeldoutResult]:
    return {
        agent.name: evaluate(agent.adapter, agent.model, heldout, max_new_tokens=max_new_tokens)
        for agent in cohort.agents
    }


def run_with_heldout(
    cohort: Any,
    heldout: Sequence[Problem],
    *,
    steps: int,
    every: int = 0,
    max_new_tokens: int = 10,
    on_step: Callable[[int, dict[str, dict[str, float]]], None] | None = None,
) -> dict[str, Any]:
    """Train ``cohort`` for ``steps`` cohort steps, evaluating held-out accuracy at step 0, every ``every``
    steps and at the end. Returns ``{"evals": [{"step", agent: result dict}], "metrics": {agent: [...]},
    "seconds"}`` — the record the toy benchmark aggregates over seeds and methods."""
    started = time.perf_counter()

    def heldout_accuracy(trained: Any) -> dict[str, dict[str, Any]]:
        return {name: r.as_dict() for name, r in evaluate_cohort(trained, heldout, max_new_tokens).items()}

    callbacks: list[Callback] = [PeriodicEval(heldout_accuracy, every, at_start=True)]
    if on_step is not None:
        callbacks.append(StepHook(on_step))
    run = fit(cohort, callbacks, max_steps=steps, start_step=0)
    return {"evals": run.evals, "metrics": run.history, "seconds": time.perf_counter() - started}
