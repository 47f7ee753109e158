"""The config's cross-field rules that read implementation tables (rewards, engines, losses, topologies) or
another module's settings (warm start), and the template-date rule.

Why apart from :mod:`corl_vl.config`: those tables are imported only when a config is checked, so importing
the config's dataclasses stays light and no package imports the config back in a circle.
"""

from __future__ import annotations

import dataclasses
import datetime
from typing import Any

from corl_vl.config_checks import check_config, check_device_names, check_mapping
from corl_vl.errors import CorlError

# name-valued keys whose choices no implementation table owns (the others are read from their tables)
PEER_REWARDS = ("hard", "soft")
REPORT_TO = ("tensorboard", "wandb", "none")  # metrics.jsonl is always written
SELECT_BEST = ("none", "peer_agreement", "accuracy")  # see corl_vl.train.validation
SCHEDULERS = ("cosine", "constant")
TRUNCATED = ("keep", "mask", "drop")  # see corl_vl.train.subsets
OFFLOAD = ("none", "cpu")  # see corl_vl.train.optimizer


def finalize(cfg: Any, source: str) -> Any:
    """Cross-field checks on a built :class:`~corl_vl.config.CohortConfig`, done once after all overrides."""

    def bad(key: str, msg: str) -> CorlError:
        return CorlError(f"{key}: {msg} (in {source})")

    if not cfg.agents:
        raise bad("agents", "at least one agent is required")
    tp = cfg.rollout.tensor_parallel_size
    if tp < 1:
        raise bad("rollout.tensor_parallel_size", f"must be ≥ 1, got {tp}")
    for i, agent in enumerate(cfg.agents):
        if agent.gpus is not None and (agent.gpus < 1 or agent.gpus % tp):
            raise bad(f"agents.{i}.gpus", f"must be a positive multiple of rollout.tensor_parallel_size={tp}")
        if not agent.model:
            raise bad(f"agents.{i}.model", "missing (a preset name or a checkpoint folder)")
        if not agent.name:
            agent.name = agent.model.rstrip("/").split("/")[-1]
        check_template_date(agent, f"agents.{i}", bad)
    check_config(cfg, bad)  # names that become paths, every number finite and in range
    check_device_names(cfg.agents, bad)  # agents[i].devices: cpu, cuda or cuda:N (visibility: at placement)
    names = cfg.agent_names()
    if len(set(names)) != len(names):
        raise bad("agents", f"agent names must be unique, got {names}")
    if not 0 <= cfg.grpo.min_new_tokens <= cfg.grpo.max_new_tokens:
        raise bad(
            "grpo.min_new_tokens",
            f"must be in [0, grpo.max_new_tokens={cfg.grpo.max_new_tokens}], got {cfg.grpo.min_new_tokens}",
        )
    check_trainer_controls(cfg, bad)
    check_pixel_budget(cfg, bad)
    if cfg.distributed.zero_stage not in (None, 1, 2, 3):
        raise bad("distributed.zero_stage", f"must be 1, 2 or 3, got {cfg.distributed.zero_stage}")
    if cfg.reward.topology == "graph":
        unknown = {n for k, v in cfg.reward.edges.items() for n in [k, *v]} - set(names)
        if unknown:
            raise bad("reward.edges", f"unknown agent(s) {sorted(unknown)}; agents are {names}")
    check_choices(cfg, bad)
    if cfg.eval.select_best != "none" and cfg.eval.every < 1:
        raise bad(
            "eval.select_best", f"'{cfg.eval.select_best}' needs periodic validation: set eval.every ≥ 1"
        )
    if cfg.experiment is not None:
        check_experiment(cfg, bad)
    return cfg


def check_topology(cfg: Any, bad: Any) -> None:
    """The supervision graph a peer reward needs (every agent supervised, names known), built as the cohort builds
    it, so a graph that leaves an agent alone is refused here, not after the models load."""
    from corl_vl.rewards.topology import from_config  # lazy: numpy

    names = cfg.agent_names()
    graph = cfg.reward.topology == "graph"
    spec: Any = {"graph": cfg.reward.edges} if graph else cfg.reward.topology
    try:
        from_config(spec, len(names), agent_names=names)
    except CorlError as err:
        raise bad("reward.edges" if graph else "reward.topology", str(err)) from None


def check_choices(cfg: Any, bad: Any) -> None:
    """Every name-valued key against the table that implements it (imported here, see the module top)."""
    # lazy: config-path, numpy
    from corl_vl.answers.voting import TIE_POLICIES
    from corl_vl.config_loss import check_loss_menu
    from corl_vl.losses.objectives import ADVANTAGES, GROUP_NORMALISED, LOSS_TYPES
    from corl_vl.rewards.combine import parse_combine
    from corl_vl.rewards.registry import get_reward, load_reward_module, reward_names
    from corl_vl.rewards.reliability import WEIGHTINGS
    from corl_vl.rewards.topology import TOPOLOGIES
    from corl_vl.rollout import ENGINES

    check_loss_menu(cfg, bad)  # policy loss, rollout correction, KL, entropy, overlong
    if cfg.reward.module:  # trusted code, imported now so that reward.name and reward.combine may name it
        load_reward_module(cfg.reward.module)
    for i, (name, _) in enumerate(parse_combine(cfg.reward.combine)):
        if name not in reward_names():
            raise bad(f"reward.combine.{i}.name", f"must be one of {', '.join(reward_names())}, got '{name}'")
    choices = {
        "reward.name": (cfg.reward.name, reward_names()),
        "grpo.truncated": (cfg.grpo.truncated, TRUNCATED),
        "rollout.engine": (cfg.rollout.engine, ("auto", *ENGINES)),
        "reward.topology": (cfg.reward.topology, TOPOLOGIES),
        "reward.ties": (cfg.reward.ties, TIE_POLICIES),
        "reward.weighting": (cfg.reward.weighting, WEIGHTINGS),
        "reward.peer_reward": (cfg.reward.peer_reward, PEER_REWARDS),
        "train.scheduler": (cfg.train.scheduler, SCHEDULERS),
        "grpo.loss_type": (cfg.grpo.loss_type, LOSS_TYPES),
        "grpo.advantage": (cfg.grpo.advantage, ADVANTAGES),
        "eval.select_best": (cfg.eval.select_best, SELECT_BEST),
        "distributed.backend": (cfg.distributed.backend, ("auto", "gloo", "nccl")),
        "optimizer.offload": (cfg.optimizer.offload, OFFLOAD),
    }
    for key, (value, allowed) in choices.items():
        if value not in allowed:
            raise bad(key, f"must be one of {', '.join(allowed)}, got '{value}'")
    for sink in cfg.train.report_to:
        if sink not in REPORT_TO:
            raise bad("train.report_to", f"entries must be among {', '.join(REPORT_TO)}, got '{sink}'")
    if cfg.grpo.k < 2 and cfg.grpo.advantage in GROUP_NORMALISED:
        raise bad(
            "grpo.k",
            f"must be ≥ 2 with grpo.advantage={cfg.grpo.advantage}: rewards are centred within each problem's "
            f"{cfg.grpo.k} completion(s), so a single completion always gets advantage 0 and nothing trains",
        )
    source = cfg.eval.source or cfg.data.train
    if cfg.eval.every and source == "synthetic":
        from corl_vl.data.synth import SPLITS  # lazy: PIL

        if cfg.eval.split not in SPLITS:
            raise bad(
                "eval.split",
                f"synthetic data has the splits {', '.join(SPLITS)}, not '{cfg.eval.split}' (use "
                "eval.split: validation, the default, or eval.source for a validation file of your own)",
            )
    spec = get_reward(cfg.reward.name)
    if spec.uses_peers and len(cfg.agents) < 2:
        raise bad("agents", "Co-RL needs at least two agents (use --baseline for a single model)")
    if cfg.reward.topology == "mutual" and spec.uses_peers and len(cfg.agents) != 2:
        raise bad(
            "reward.topology", f"mutual needs exactly 2 agents, got {len(cfg.agents)} (use ring or all_peers)"
        )
    if spec.uses_peers:
        check_topology(cfg, bad)
    if spec.paired_views and cfg.grpo.dynamic_sampling:  # a draw's twin groups would be kept one by one
        raise bad("grpo.dynamic_sampling", f"reward.name={cfg.reward.name} pairs views; set it to 0")
    if spec.paired_views:
        missing = [a.name for a in cfg.agents if not a.data_view]
        if missing:
            raise bad(
                f"agents.{missing[0]}.data_view",
                f"reward.name={cfg.reward.name} needs each agent's rephrased view (a paired file; write one "
                "with `corl-vl data rephrase`)",
            )


def check_trainer_controls(cfg: Any, bad: Any) -> None:
    """The GRPO batch controls and run bookkeeping counts (docs/training.md, "Trainer controls")."""
    grpo = cfg.grpo
    if grpo.updates_per_batch > cfg.data.problems_per_step:
        raise bad(
            "grpo.updates_per_batch",
            f"{grpo.updates_per_batch} mini-batches of whole groups need data.problems_per_step ≥ that, "
            f"got {cfg.data.problems_per_step}",
        )
    if grpo.votes is not None and grpo.votes < grpo.k:
        raise bad("grpo.votes", f"must be ≥ grpo.k={grpo.k} (k of the votes are trained), got {grpo.votes}")
    counts = {
        "grpo.dynamic_sampling": grpo.dynamic_sampling,
        "train.log_completions": cfg.train.log_completions,
        "train.save_total_limit": cfg.train.save_total_limit,
    }
    for key, value in counts.items():
        if value < 0:
            raise bad(key, f"must be ≥ 0, got {value}")
    if cfg.data.max_prompt_tokens is not None and cfg.data.max_prompt_tokens < 1:
        raise bad("data.max_prompt_tokens", f"must be ≥ 1, got {cfg.data.max_prompt_tokens}")


def check_experiment(cfg: Any, bad: Any) -> None:
    from corl_vl.science.warm_start import WarmStartSpec  # lazy: PIL, numpy

    exp = cfg.experiment
    assert exp is not None
    sets = exp.warm_start.get("skill_sets")
    names = [a.name for a in cfg.agents]
    if not sets or not all(isinstance(g, list) for g in sets) or not any(sets):
        raise bad("experiment.warm_start.skill_sets", "must be one list of strong skills per agent")
    if len(sets) != len(cfg.agents):
        raise bad("experiment.warm_start.skill_sets", f"{len(sets)} skill sets for {len(cfg.agents)} agents")
    for name, group in zip(names, sets):
        if not group and name not in exp.agents:
            raise bad(
                "experiment.warm_start.skill_sets",
                f"agent {name} has no skills; give it its own warm start under experiment.agents.{name}",
            )
    known = set(WarmStartSpec.__dataclass_fields__) - {"model", "strong_skills", "weak_skills"}
    contested = exp.warm_start.get("contested_skills", [])
    if not isinstance(contested, list) or not all(isinstance(c, str) for c in contested):
        raise bad("experiment.warm_start.contested_skills", "must be a list of skill names")
    taken = sorted(set(contested) & {s for g in sets for s in g})
    if taken:
        raise bad("experiment.warm_start.contested_skills", f"{taken[0]} is also an agent's strong skill")
    for where, settings in [
        ("warm_start", exp.warm_start),
        *((f"agents.{n}", v) for n, v in exp.agents.items()),
    ]:
        _check_warm_start_settings(exp, where, settings, known, bad)
    stray = sorted(set(exp.agents) - set(names))
    if stray:
        raise bad(f"experiment.agents.{stray[0]}", f"no such agent; agents are {names}")
    if cfg.data.train != "synthetic":
        raise bad(
            "data.train", "an experiment trains on synthetic problems of its skills (data.train: synthetic)"
        )
    for key in ("per_skill", "max_new_tokens"):
        if getattr(exp.heldout, key) < 1:
            raise bad(f"experiment.heldout.{key}", f"must be ≥ 1, got {getattr(exp.heldout, key)}")


def _check_warm_start_settings(
    exp: Any, where: str, settings: dict[str, Any], known: set[str], bad: Any
) -> None:
    """``experiment.warm_start`` or one ``experiment.agents.<name>``: known keys, an agent's own strong/weak
    skills (e.g. two agents strong on the same skill) among the cohort's, per-skill error rates in [0, 1]."""
    cohort_wide = {"skill_sets", "contested_skills"} if where == "warm_start" else set()
    own_skills = {"strong_skills", "weak_skills"} if where != "warm_start" else set()
    unknown = sorted(set(settings) - known - own_skills - cohort_wide)
    if unknown:
        raise bad(f"experiment.{where}.{unknown[0]}", f"unknown key; known: {', '.join(sorted(known))}")
    check_mapping(settings, f"experiment.{where}.", bad)
    for key in own_skills & set(settings):
        value = settings[key]
        if not isinstance(value, list) or not set(value) <= set(exp.skills):
            raise bad(f"experiment.{where}.{key}", f"must be a list of the cohort's skills {exp.skills}")
    rates = settings.get("weak_error_rates", {})
    if not isinstance(rates, dict) or not all(
        isinstance(r, (int, float)) and not isinstance(r, bool) and 0 <= r <= 1 for r in rates.values()
    ):
        raise bad(f"experiment.{where}.weak_error_rates", f"must map skills to shares in [0, 1], got {rates}")


def check_template_date(agent: Any, key: str, bad: Any) -> None:
    """One place for the pinned date: the field, or ``adapter_kwargs.template_date``; YYYY-MM-DD."""
    given = agent.adapter_kwargs.pop("template_date", None)
    if given is not None:
        given = given.isoformat() if isinstance(given, datetime.date) else str(given)
        if agent.template_date not in (None, given):
            raise bad(f"{key}.template_date", f"{agent.template_date} differs from adapter_kwargs ({given})")
        agent.template_date = given
    if agent.template_date is not None:
        try:
            datetime.date.fromisoformat(agent.template_date)
        except ValueError:
            raise bad(f"{key}.template_date", f"expected YYYY-MM-DD, got {agent.template_date!r}") from None


def check_pixel_budget(cfg: Any, bad: Any) -> None:
    """``adapter_kwargs.image_options`` (a mapping in YAML) checked key by key, and ``data.max_pixels`` /
    ``data.min_pixels`` written into every agent's image options, where a family with a pixel budget reads
    them (the others have fixed-size tiles or crops and ignore them). An agent's own value wins."""
    # lazy: PIL, numpy, tokenizers
    from model_adapters.images import ImageOptions, image_options_from

    budget = {
        k: getattr(cfg.data, k) for k in ("min_pixels", "max_pixels") if getattr(cfg.data, k) is not None
    }
    if "min_pixels" in budget and "max_pixels" in budget and budget["min_pixels"] > budget["max_pixels"]:
        raise bad("data.min_pixels", f"{budget['min_pixels']} > data.max_pixels {budget['max_pixels']}")
    for i, agent in enumerate(cfg.agents):
        given = agent.adapter_kwargs.get("image_options")
        if given is None and not budget:
            continue
        where = f"agents.{i}.adapter_kwargs.image_options"
        if isinstance(given, ImageOptions):  # built in Python (tests, the API)
            given = dataclasses.asdict(given)
        merged = {**budget, **given} if isinstance(given, dict) else given if given is not None else budget
        try:
            image_options_from(merged, ImageOptions(), where)
        except CorlError as err:
            raise bad(where, str(err).removeprefix(f"{where}: ")) from None
        agent.adapter_kwargs["image_options"] = dict(merged)
