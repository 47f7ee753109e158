"""corl-vl: Co-RL for vision-language models — label-free multi-agent GRPO with peer rewards.

The Python API for scripting experiments (the README has a worked example)::

    config = corl_vl.load_config("cohort.yaml", ["train.max_steps=50"])   # or corl_vl.demo_config()
    run = corl_vl.train_cohort(config)     # the recipe behind `corl-vl train` (run folder, checkpoints …)
    print(corl_vl.evaluate(run.cohort, corl_vl.validation_problems("synthetic", "test", limit=64)))

Lower level: ``build_cohort(config)`` and ``fit(cohort, callbacks)`` are the recipe's own parts.

Names are imported on first use, so ``import corl_vl`` (and the CLI's start) stays fast: torch and the models
load only when a cohort is built.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

# public name → the module that defines it
_EXPORTS = {
    "CohortConfig": "corl_vl.config",
    "load_config": "corl_vl.config",
    "config_from_dict": "corl_vl.config",
    "Cohort": "corl_vl.train.cohort",
    "build_cohort": "corl_vl.recipe",
    "train_cohort": "corl_vl.recipe",
    "demo_config": "corl_vl.experiment",
    "pair_config": "corl_vl.config",
    "evaluate": "corl_vl.api",
    "evaluate_protocol": "corl_vl.api",
    "fit": "corl_vl.train.loop",
    "Callback": "corl_vl.train.loop",
    "TrainingRun": "corl_vl.train.loop",
    "standard_callbacks": "corl_vl.train.callbacks",
    "validation_problems": "corl_vl.train.validation",
    "register_reward": "corl_vl.rewards.registry",
    "register_adapter": "model_adapters.registry",
    "CorlError": "corl_vl.errors",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if (
        name == "train_cohort"
    ):  # ``corl_vl.train`` is the trainer package; the recipe's train is exported as this
        from corl_vl.recipe import train  # lazy: config-path (every corl_vl import runs this file)

        globals()[name] = train
        return train
    if name not in _EXPORTS:
        raise AttributeError(f"module 'corl_vl' has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])
