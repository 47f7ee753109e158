"""The plan of a cohort config: its settings read from the config (DeepSpeed JSON, micro-batch, checkpointing,
freezing, LoRA), planned by :func:`corl_vl.plan.planner.plan_settings`, and the cheapest fixes when it does not
fit (:mod:`corl_vl.plan.fixes`, which re-plans through the planner). ``corl-vl plan`` and ``corl-vl train`` start
here."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from corl_vl.errors import CorlError
from corl_vl.io import read_json_file
from corl_vl.train.training_defaults import checkpointing_on
from model_adapters.memory_facts import memory_facts

from .fixes import cheapest_fixes
from .model import Plan, Settings
from .planner import plan_settings

FactsFor = Callable[[Any], Any]  # AgentConfig → ModelFacts


def _facts(agent: Any) -> Any:
    return memory_facts(agent.model, adapter=agent.adapter, adapter_kwargs=agent.adapter_kwargs)


def _zero_settings(settings: Any) -> tuple[int, bool]:
    """(ZeRO stage, optimizer offload) of the ``distributed`` section's DeepSpeed JSON, 0 without DeepSpeed."""
    path = settings.deepspeed
    if not path:
        return 0, False
    raw = read_json_file(path, "distributed.deepspeed")
    if not isinstance(raw, dict):
        raise CorlError(
            f"distributed.deepspeed: {path} holds JSON {type(raw).__name__}, not an object of DeepSpeed settings"
        )
    zero = raw.get("zero_optimization", {})
    stage = settings.zero_stage or int(zero.get("stage", 0))
    offload = (zero.get("offload_optimizer") or {}).get("device", "none") == "cpu"
    return stage, offload


def plan_for_config(
    cfg: Any, gpus: int, gpu_memory: int, *, facts_for: FactsFor | None = None, **levers: Any
) -> Plan:
    """The plan of ``cfg`` on ``gpus`` devices of ``gpu_memory`` bytes each (``levers``: Settings overrides)."""
    if gpus < 1 or gpu_memory <= 0:
        raise CorlError(f"plan: need at least one GPU with memory (got {gpus} × {gpu_memory} bytes)")
    stage, offload = _zero_settings(cfg.distributed)
    settings = Settings(
        gpus=gpus,
        gpu_memory=gpu_memory,
        micro_batch=cfg.grpo.micro_batch_size,
        checkpointing=checkpointing_on(cfg.train.gradient_checkpointing, "cuda"),
        zero_stage=stage,
        offload_optimizer=offload or cfg.optimizer.offload == "cpu",
        gpu_memory_utilization=cfg.rollout.gpu_memory_utilization,
        disable_dropout=cfg.train.disable_dropout,
        # the plan counts the projector with the tower (it is about 1 % of the parameters of these models)
        freeze_vision="vision_tower" in cfg.train.freeze,
        lora=all(a.lora is not None for a in cfg.agents),
    )
    settings = dataclasses.replace(settings, **levers)
    facts = [(facts_for or _facts)(a) for a in cfg.agents]
    plan = plan_settings(cfg, settings, facts)
    if not plan.fits:
        plan.fixes = cheapest_fixes(cfg, settings, facts)
    return plan
