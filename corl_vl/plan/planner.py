"""The memory plan of a cohort config on G GPUs: per agent and device, the verdict, and the cheapest fixes.

Why before any model loads: a real-scale run that does not fit fails minutes in (or, with vLLM, refuses to start),
and the reason is arithmetic. :func:`plan_for_config` reads only the config and each model's sizes
(:func:`model_adapters.memory_facts.memory_facts`: published configs, no download) and applies
:mod:`corl_vl.plan.arithmetic`.

Placement is the trainer's (:func:`corl_vl.train.device_placement.place_agents`, ``agents[i].devices`` included):
with G ≥ N GPUs agent i gets its own block of G // N devices (its data-parallel ranks); with G < N the agents are
spread round-robin and agents on one device take turns: the idle ones keep their weights (and vLLM share) on it,
their fp32 masters and optimizer state wait in CPU memory. Levers are tried in order of cost, each on top of the
previous. ``train.gradient_checkpointing: null`` is planned as on (the GPU default).
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from corl_vl.errors import CorlError
from corl_vl.rollout.sizing import default_max_model_len
from corl_vl.train.device_placement import place_agents
from corl_vl.train.training_defaults import checkpointing_on

from . import arithmetic as ar

PROMPT_TEXT_TOKENS = 256  # question, options and chat template of one prompt (the images come on top)
IMAGES_PER_PROMPT = 1


@dataclass(frozen=True)
class Settings:
    """What the plan varies: the config's values and the levers applied on top of them."""

    gpus: int
    gpu_memory: int  # bytes per GPU
    micro_batch: int
    checkpointing: bool
    zero_stage: int
    offload_optimizer: bool = False
    freeze_vision: bool = False
    lora: bool = False
    gpu_memory_utilization: float = 0.45
    disable_dropout: bool = True


@dataclass
class AgentPlan:
    name: str
    model: str
    device: int  # first device of its block
    ranks: int
    items: dict[str, int]  # bytes on each of its devices
    activation_settings: dict[str, int] = field(
        default_factory=dict
    )  # activations with / without checkpointing
    vllm_needed: int = 0  # vLLM weights + KV cache at max_model_len + overhead (must fit its reserved share)
    devices: list[str] = field(default_factory=list)  # its device names (the trainer's placement)
    turns_with: list[str] = field(default_factory=list)  # agents it takes turns with on its device

    @property
    def resident(self) -> int:
        """What stays on the device between this agent's turns (weights and optimizer, reserved vLLM share)."""
        keep = ("weights", "master_weights", "optimizer_state", "vllm_reserved")
        return sum(v for k, v in self.items.items() if k in keep)

    @property
    def away(self) -> int:
        """What waits in CPU memory while the agent is idle on a shared device (fp32 masters, AdamW state)."""
        return self.items["master_weights"] + self.items["optimizer_state"]

    @property
    def peak(self) -> int:
        return max(self.update_peak, self.rollout_peak)

    @property
    def update_peak(self) -> int:
        return ar.update_peak(self.items)

    @property
    def rollout_peak(self) -> int:
        i = self.items
        return (
            i["weights"]
            + i["master_weights"]
            + i["optimizer_state"]
            + i.get("vllm_reserved", 0)
            + i.get("hf_kv_cache", 0)
        )


@dataclass
class Plan:
    """The verdict: ``fits``, per-device totals, the shortfall and the cheapest changes that make it fit."""

    settings: Settings
    agents: list[AgentPlan]
    device_peak: dict[int, int]
    notes: list[str] = field(default_factory=list)
    fixes: list[dict[str, Any]] = field(default_factory=list)

    @property
    def fits(self) -> bool:
        return self.shortfall == 0 and all(
            a.vllm_needed <= a.items.get("vllm_reserved", a.vllm_needed) for a in self.agents
        )

    @property
    def shortfall(self) -> int:
        return max(0, max(self.device_peak.values()) - self.settings.gpu_memory)

    @property
    def first_fix(self) -> str | None:
        """The cheapest change after which the plan fits: one lever alone, else the fewest stacked levers, else
        more GPUs; None when it fits already or nothing does."""
        if self.fits:
            return None
        levers = [f for f in self.fixes if "stacked" in f]
        for fix in levers:
            if fix["fits"]:
                return fix["change"]
        for fix in levers:
            if fix["stacked_fits"]:
                return fix["stacked"]
        more = [f["change"] for f in self.fixes if "stacked" not in f]
        return more[0] if more else None

    def refusal(self) -> str:
        """Why the run does not fit, in one line: the shortfall (or the vLLM share too small) and the first fix."""
        s = self.settings
        where = f"{s.gpus} × {round(s.gpu_memory / ar.GIB, 1):g} GiB GPU(s)"
        if self.shortfall:
            fullest = max(self.device_peak, key=lambda d: self.device_peak[d])
            short = self.shortfall
            amount = f"{short / ar.GIB:.1f} GiB" if short >= ar.GIB // 10 else f"{short / 2**20:.0f} MiB"
            why = f"short by {amount} on GPU {fullest}"
        else:
            a = max(self.agents, key=lambda a: a.vllm_needed - a.items.get("vllm_reserved", 0))
            why = (
                f"agent {a.name}'s vLLM engine needs {a.vllm_needed / ar.GIB:.1f} GiB, its share "
                f"(rollout.gpu_memory_utilization) is {a.items.get('vllm_reserved', 0) / ar.GIB:.1f} GiB"
            )
        fix = self.first_fix or "none of the plan's levers is enough"
        return (
            f"memory plan: the run does not fit on {where}: {why}; first fix: {fix} (details: corl-vl plan)"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "fits": self.fits,
            "shortfall_gib": round(self.shortfall / ar.GIB, 2),
            "settings": {
                **dataclasses.asdict(self.settings),
                "gpu_memory_gib": self.settings.gpu_memory / ar.GIB,
            },
            "devices": {str(d): round(b / ar.GIB, 2) for d, b in self.device_peak.items()},
            "agents": [
                {
                    "name": a.name,
                    "model": a.model,
                    "device": a.device,
                    "ranks": a.ranks,
                    "devices": a.devices,
                    "takes_turns_with": a.turns_with,
                    "peak_gib": round(a.peak / ar.GIB, 2),
                    "vllm_needed_gib": round(a.vllm_needed / ar.GIB, 2),
                    "items_gib": {k: round(v / ar.GIB, 3) for k, v in a.items.items()},
                    "activations_gib": {k: round(v / ar.GIB, 3) for k, v in a.activation_settings.items()},
                }
                for a in self.agents
            ],
            "fixes": self.fixes,
            "first_fix": self.first_fix,
            "notes": self.notes,
        }


FactsFor = Callable[[Any], Any]  # AgentConfig → ModelFacts


def _facts(agent: Any) -> Any:
    from model_adapters.memory_facts import memory_facts

    return memory_facts(agent.model, adapter=agent.adapter, adapter_kwargs=agent.adapter_kwargs)


def _zero_settings(cfg: Any) -> tuple[int, bool]:
    """(ZeRO stage, optimizer offload) of the config's DeepSpeed JSON, 0 without DeepSpeed."""
    path = cfg.distributed.deepspeed
    if not path:
        return 0, False
    try:
        raw = json.loads(Path(path).read_text())
    except (OSError, ValueError) as err:
        raise CorlError(f"distributed.deepspeed: cannot read {path} ({err})") from None
    zero = raw.get("zero_optimization", {})
    stage = cfg.distributed.zero_stage or int(zero.get("stage", 0))
    offload = (zero.get("offload_optimizer") or {}).get("device", "none") == "cpu"
    return stage, offload


def plan_for_config(
    cfg: Any, gpus: int, gpu_memory: int, *, facts_for: FactsFor | None = None, **levers: Any
) -> Plan:
    """The plan of ``cfg`` on ``gpus`` devices of ``gpu_memory`` bytes each (``levers``: Settings overrides)."""
    if gpus < 1 or gpu_memory <= 0:
        raise CorlError(f"plan: need at least one GPU with memory (got {gpus} × {gpu_memory} bytes)")
    stage, offload = _zero_settings(cfg)
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
        from .fixes import cheapest_fixes  # the levers re-plan through this module

        plan.fixes = cheapest_fixes(cfg, settings, facts)
    return plan


def plan_settings(cfg: Any, s: Settings, facts: list[Any]) -> Plan:
    """``cfg`` planned under the settings ``s``: placement, each agent's items, each device's peak, notes."""
    where = place_agents(
        cfg.agent_names(), [a.devices for a in cfg.agents], [f"cuda:{d}" for d in range(s.gpus)]
    )
    vllm = cfg.rollout.engine in ("vllm", "auto")
    max_len = PROMPT_TEXT_TOKENS + cfg.grpo.max_new_tokens
    agents: list[AgentPlan] = []
    notes: list[str] = []
    for index, (agent, f) in enumerate(zip(cfg.agents, facts, strict=True)):
        wb = ar.DTYPE_BYTES[str(agent.adapter_kwargs.get("dtype", "float32"))]
        images = IMAGES_PER_PROMPT if f.image_tokens else 0
        seq = max_len + images * f.image_tokens
        split = agent.adapter_kwargs.get("dtype") == "bfloat16"
        work = ar.Workload(s.micro_batch, seq, cfg.grpo.max_new_tokens, images, s.checkpointing, wb, split)
        ranks = len(where.devices[index])
        stage = s.zero_stage if not torch_backend(s) else 0
        sharding = ar.Sharding(ranks, stage, s.offload_optimizer)
        # an agent's own agents[i].lora (its rank), else the plan's LoRA lever (rank 16)
        rank = agent.lora.r if agent.lora is not None else ar.LORA_TARGETS_RANK
        lora = s.lora or agent.lora is not None
        items = ar.agent_items(f, work, sharding, freeze_vision=s.freeze_vision, lora=lora, lora_rank=rank)
        other = dataclasses.replace(work, checkpointing=not work.checkpointing)
        info = {  # both settings shown; the peak counts the configured one (``activations``)
            "checkpointing_on": ar.activations(f, work if work.checkpointing else other),
            "checkpointing_off": ar.activations(f, other if work.checkpointing else work),
        }
        first = where.slots[index][0]
        plan = AgentPlan(
            agent.name,
            agent.model,
            -1 if first is None else first,  # -1: a cpu override, on no GPU
            ranks,
            items,
            activation_settings=info,
            devices=where.devices[index],
            turns_with=[where.names[j] for j in where.takes_turns(index)],
        )
        concurrent = cfg.data.problems_per_step * cfg.grpo.k
        if vllm:
            plan.vllm_needed = (
                f.parameters * wb + ar.kv_cache(f, vllm_len(cfg, seq), wb) * concurrent + ar.VLLM_OVERHEAD
            )
            items["vllm_reserved"] = int(s.gpu_memory_utilization * s.gpu_memory)
            items["vllm_asleep"] = (
                ar.VLLM_OVERHEAD if cfg.rollout.sleep_between_phases else items["vllm_reserved"]
            )
        else:
            batch = min(cfg.rollout.batch_size, cfg.data.problems_per_step) * cfg.grpo.k
            items["hf_kv_cache"] = ar.kv_cache(f, seq, wb) * batch
        agents.append(plan)
    device_peak: dict[int, int] = {}
    for d in range(s.gpus):
        here = [a for a in agents if a.device <= d < a.device + a.ranks]
        if not here:
            continue
        # agents sharing a device take turns: the idle ones keep their weights and vLLM share on it, their
        # masters and optimizer state in CPU memory (train/offload.py); one at a time adds its working memory
        away = [a.away if len(here) > 1 else 0 for a in here]
        idle = [a.resident - x for a, x in zip(here, away)]
        work = [max(a.update_peak, a.rollout_peak - x) - i for a, x, i in zip(here, away, idle)]
        device_peak[d] = sum(idle) + max(work)
    if not device_peak:
        raise CorlError("plan: every agent is on the CPU (agents[i].devices); there is no GPU memory to plan")
    if where.shared:
        notes.append(
            "agents sharing a GPU take turns; the idle ones' fp32 masters and AdamW state wait in CPU memory"
        )
    if cfg.train.gradient_checkpointing is None:
        notes.append("train.gradient_checkpointing unset: on, the GPU default")
    if s.disable_dropout:
        notes.append("train.disable_dropout: every dropout probability is 0 from the start of training")
    if vllm:
        given = cfg.rollout.max_model_len
        length = (
            f"{given} (rollout.max_model_len)" if given else f"{max_len} + image tokens + margin (estimated)"
        )
        notes.append(
            f"vLLM max_model_len {length}; KV cache for {cfg.data.problems_per_step} × {cfg.grpo.k} "
            "sequences at once"
        )
    return Plan(s, agents, device_peak, notes)


def vllm_len(cfg: Any, seq: int) -> int:
    """The context the engine is built with: ``rollout.max_model_len``, else what the trainer computes from the
    longest prompt (:func:`~corl_vl.rollout.sizing.default_max_model_len`), here with the plan's estimated
    prompt (text + one image's tokens)."""
    if cfg.rollout.max_model_len is not None:
        return int(cfg.rollout.max_model_len)
    return default_max_model_len(seq - cfg.grpo.max_new_tokens, cfg.grpo.max_new_tokens)


def torch_backend(s: Settings) -> bool:
    """One GPU, or no ZeRO stage: each agent trains in one process with the Torch backend (whose
    ``optimizer.offload`` is its own); more GPUs with a ZeRO stage run DeepSpeed."""
    return s.gpus == 1 or s.zero_stage == 0


def parse_memory(text: str) -> int:
    """``80GB`` / ``80GiB`` / ``24G`` → bytes; GB and GiB are both read as 2**30 bytes (cards sold as "80GB"
    report 79–80 GiB)."""
    value = text.strip().upper().removesuffix("IB").removesuffix("B").removesuffix("G")
    try:
        gib = float(value)
    except ValueError:
        raise CorlError(f"--gpu-memory '{text}': expected a size like 80GB") from None
    if not math.isfinite(gib) or gib <= 0:
        raise CorlError(f"--gpu-memory '{text}': must be positive")
    return int(gib * ar.GIB)
