"""Periodic validation during training (``eval:`` in the config) and best-checkpoint selection.

Why: a label-free run has no training accuracy to watch, so progress is measured on a held-out *validation*
set every ``eval.every`` steps (greedy answers, the agent's own prompt format, the reward's answer
extraction). Results go into the metrics files (``eval/*`` keys, so they are plotted) and ``run.evals``.

Choosing "the best" checkpoint (``eval.select_best``):
- ``peer_agreement`` — label-free: how often an agent's greedy answer matches its peers' majority on the
  validation problems. Needs no labels, so it is available to a truly unsupervised run.
- ``accuracy`` — the validation set's labels; only meaningful on a set the user named as *validation*.
Selecting on the benchmark you report (its test split) leaks: the reported number is then the maximum over many
noisy evaluations of the same test set, biased upwards by the selection itself (docs/training.md). The default
split is therefore ``validation``, and a test split is only used when the user names it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from corl_vl.answers.equivalence import equivalent
from corl_vl.answers.voting import vote
from corl_vl.data.problem import Problem
from corl_vl.data.sources import SyntheticScope, read_problems
from corl_vl.data.synth import to_text_problem
from corl_vl.errors import CorlError
from corl_vl.eval.greedy import greedy_answers, greedy_engine
from corl_vl.io import write_text_atomic
from corl_vl.train.checkpoint import CHECKPOINTS, save_checkpoint
from corl_vl.train.loop import Callback, TrainingRun

SYNTHETIC_VALIDATION_N = 64  # synthetic validation problems when eval.limit is unset

Evaluation = Callable[[Any], dict[str, dict[str, Any]]]  # cohort → {agent: results}


def validation_problems(
    source: str,
    split: str,
    *,
    limit: int | None,
    seed: int = 0,
    skills: Sequence[str] | None = None,
    text_view: bool = False,
) -> list[Problem]:
    """The validation problems: generated (``synthetic``: its ``train``/``test`` splits, of ``skills``, as text
    when ``text_view``) or read from a file."""
    scope = SyntheticScope(tuple(skills) if skills is not None else None, text_view)
    return read_problems(
        source, split, limit=limit, seed=seed, synthetic_n=SYNTHETIC_VALIDATION_N, scope=scope
    )


def greedy_validation(problems: Sequence[Problem], max_new_tokens: int) -> Evaluation:
    """An evaluation: each agent's greedy answers → ``eval/accuracy`` (where labels exist), ``eval/parsed_frac``
    and ``eval/peer_agreement`` (share of problems where its answer equals its peers' majority answer)."""
    labelled = [p for p in problems if p.answer is not None]

    def validate_cohort(cohort: Any) -> dict[str, dict[str, Any]]:
        answers: dict[str, dict[str, str | None]] = {}
        for agent in cohort.agents:  # a text-only model is asked the pictures described in words
            view = problems if agent.adapter.supports_images else [to_text_problem(p) for p in problems]
            with agent.backend.inference_weights():
                engine = greedy_engine(agent.adapter, agent.model)
                answers[agent.name] = greedy_answers(engine, view, max_new_tokens)
        results: dict[str, dict[str, Any]] = {}
        for name, own in answers.items():
            peers = [answers[other] for other in answers if other != name]
            agreement = []
            for problem in problems:
                label = vote([peer[problem.id] for peer in peers], choices=problem.choices).label
                mine = own[problem.id]
                if label is not None and mine is not None:
                    agreement.append(equivalent(label, mine, problem.choices))
            result = {
                "eval/parsed_frac": sum(a is not None for a in own.values()) / len(problems),
                "eval/peer_agreement": sum(agreement) / len(agreement) if agreement else 0.0,
            }
            if labelled:
                hits = [
                    own[p.id] is not None and equivalent(p.answer, own[p.id], p.choices) for p in labelled
                ]
                result["eval/accuracy"] = sum(hits) / len(hits)
            results[name] = result
        return results

    return validate_cohort


class PeriodicEval(Callback):
    """Run ``evaluation`` every ``every`` steps and after the last one (and before the first: ``at_start``).

    Each result goes to ``run.evals`` as ``{"step", agent: results}``; numeric results also into the step's
    metrics (as ``eval/...``), which the metrics files and plots pick up. With ``select_best`` a checkpoint is
    saved whenever the cohort's mean of that criterion improves, and ``checkpoints/best`` names it.
    """

    def __init__(
        self,
        evaluation: Evaluation,
        every: int,
        *,
        at_start: bool = False,
        select_best: str = "none",
        run_dir: str | Path | None = None,
    ) -> None:
        if select_best != "none" and run_dir is None:
            raise CorlError("eval.select_best needs a run folder to save the best checkpoint in")
        self.evaluation, self.every, self.at_start = evaluation, every, at_start
        self.select_best, self.run_dir = select_best, Path(run_dir) if run_dir is not None else None
        self.best: float | None = None
        self.failure: BaseException | None = None
        self.problems: list[Problem] = []  # the validation set, when built from the config
        self.reraise = _ReraiseFailure(self)  # placed after the metrics sinks: a failed step keeps its row

    @classmethod
    def from_config(
        cls, cohort: Any, run_dir: str | Path, scope: SyntheticScope | None = None
    ) -> PeriodicEval:
        """The ``eval:`` section's validation; ``scope``: which synthetic problems (an experiment's own skills,
        in its view, :class:`corl_vl.experiment.Experiment`)."""
        cfg = cohort.cfg
        source = cfg.eval.source or cfg.data.train
        problems = read_problems(
            source,
            cfg.eval.split,
            limit=cfg.eval.limit,
            seed=cfg.data.seed,
            synthetic_n=SYNTHETIC_VALIDATION_N,
            scope=scope,
        )
        if cfg.eval.select_best == "accuracy" and not any(p.answer is not None for p in problems):
            raise CorlError(f"eval.select_best=accuracy: the validation set {source} has no answers")
        periodic = cls(
            greedy_validation(problems, cfg.eval.max_new_tokens),
            cfg.eval.every,
            at_start=cfg.eval.at_start,
            select_best=cfg.eval.select_best,
            run_dir=run_dir,
        )
        periodic.problems = problems
        return periodic

    def on_fit_start(self, run: TrainingRun) -> None:
        if self.at_start:
            run.evals.append({"step": run.completed, **self.evaluation(run.cohort)})

    def on_step_end(self, run: TrainingRun) -> None:
        if not ((self.every and run.completed % self.every == 0) or run.completed == run.max_steps):
            return
        try:
            results = self.evaluation(run.cohort)
        except Exception as err:  # raised again once the step's metrics are written (self.reraise)
            self.failure = err
            return
        run.evals.append({"step": run.completed, **results})
        for name, values in results.items():
            if name in run.metrics:
                run.metrics[name].update(_numbers(values))
        if self.select_best != "none":
            self._keep_if_best(run, results)

    def _keep_if_best(self, run: TrainingRun, results: dict[str, dict[str, Any]]) -> None:
        key = f"eval/{self.select_best}"
        scores = [values[key] for values in results.values() if key in values]
        if not scores:
            return
        score = sum(scores) / len(scores)
        if self.best is not None and score <= self.best:
            return
        self.best = score
        assert self.run_dir is not None
        folder = save_checkpoint(self.run_dir, run.cohort)
        root = self.run_dir / CHECKPOINTS
        record = {
            "step": run.completed,
            "criterion": self.select_best,
            "score": score,
            "checkpoint": folder.name,
        }
        write_text_atomic(root / "best.json", json.dumps(record, indent=2))
        write_text_atomic(root / "best", folder.name)


class _ReraiseFailure(Callback):
    def __init__(self, evaluation: PeriodicEval) -> None:
        self.evaluation = evaluation

    def on_step_end(self, run: TrainingRun) -> None:
        if self.evaluation.failure is not None:
            failure, self.evaluation.failure = self.evaluation.failure, None
            raise failure


def _numbers(values: dict[str, Any], prefix: str = "") -> dict[str, float]:
    """Scalar results, nested dicts flattened with ``/`` (``per_skill/shape_color``)."""
    out: dict[str, float] = {}
    for key, value in values.items():
        name = f"{prefix}{key}" if prefix or key.startswith("eval/") else f"eval/{key}"
        if isinstance(value, dict):
            out.update(_numbers(value, f"{name}/"))
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            out[name] = float(value)
    return out
