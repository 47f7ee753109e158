"""The memory plan of a cohort config under given settings on G GPUs: per agent and GPU, the verdict.

Why before any model loads: a real-scale run that does not fit fails minutes in (or, with vLLM, refuses to start),
and the reason is arithmetic. :func:`plan_settings` takes the config, the settings
(:func:`corl_vl.plan.cohort_plan.plan_for_config` reads them from the config) and each model's sizes
(:func:`model_adapters.memory_facts.memory_facts`: published configs, no download) and applies
:mod:`corl_vl.plan.arithmetic` to the processes ``corl-vl train`` launches (:mod:`corl_vl.plan.layout`): one
process per agent (G < N: agents sharing a GPU take turns) or, with ``distributed.deepspeed``, one per GPU of
each agent's block. Each process holds a CUDA context; the active agent's peak is the largest of its phases
(rollout, weight sync, update, DeepSpeed's init), and an idle agent on a shared GPU leaves its context, bf16
weights, KL reference and sleeping engine there. The weights' dtype is ``adapter_kwargs.dtype`` as resolved on
CUDA (``auto``, the default, is bf16). Levers are tried in order of cost, each on top of the previous.
``train.gradient_checkpointing: null`` is planned as on (the GPU default).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from corl_vl.errors import CorlError
from corl_vl.rollout.sizing import default_max_model_len
from model_adapters.base import AUTO_DTYPE, resolve_dtype

from . import arithmetic as ar
from .layout import ProcessLayout, process_layout
from .model import AgentPlan, Plan, Settings

PROMPT_TEXT_TOKENS = 256  # question, options and chat template of one prompt (the images come on top)
IMAGES_PER_PROMPT = 1
ITEM_ORDER = (
    *ar.STATIC,
    "gradients",
    "activations",
    "vision_activations",
    "logprob_tail",
    "optimizer_step",
    "init_transient",
    "sync_gather",
    "vllm_share",
    "vllm_weights",
    "vllm_asleep",
    "hf_kv_cache",
)
__all__ = ["AgentPlan", "Plan", "Settings", "parse_memory", "plan_settings"]


def plan_settings(cfg: Any, s: Settings, facts: list[Any]) -> Plan:
    """``cfg`` planned under the settings ``s``: the process layout, each agent's items, each GPU's peak."""
    deepspeed = not torch_backend(s)
    blocks = [a.gpus for a in cfg.agents] if deepspeed else None
    layout = process_layout(len(cfg.agents), s.gpus, blocks, deepspeed=deepspeed)
    agents = [_agent_plan(cfg, s, layout, i, f) for i, f in enumerate(facts)]
    device_peak: dict[int, int] = {}
    for gpu in range(s.gpus):
        here = [agents[i] for i in layout.agents_on(gpu)]
        if here:  # one active agent at a time; the others idle beside it
            idle = sum(a.idle for a in here)
            device_peak[gpu] = max(a.peak + idle - a.idle for a in here)
    return Plan(s, agents, device_peak, layout, _notes(cfg, s, layout, agents))


def _agent_plan(cfg: Any, s: Settings, layout: ProcessLayout, index: int, f: Any) -> AgentPlan:
    """One agent's items on each of its GPUs (one process there) and its vLLM engine's fit."""
    agent = cfg.agents[index]
    dtype = resolve_dtype(str(agent.adapter_kwargs.get("dtype") or AUTO_DTYPE), "cuda")
    wb = ar.DTYPE_BYTES[dtype]
    images = IMAGES_PER_PROMPT if f.image_tokens else 0
    seq = PROMPT_TEXT_TOKENS + cfg.grpo.max_new_tokens + images * f.image_tokens
    work = ar.Workload(
        s.micro_batch,
        seq,
        cfg.grpo.max_new_tokens,
        images,
        s.checkpointing,
        wb,
        dtype == "bfloat16",
        group=cfg.grpo.k,
    )
    gpus = layout.gpus_of(index)
    sharding = ar.Sharding(len(gpus), s.zero_stage if layout.deepspeed else 0, s.offload_optimizer)
    # an agent's own agents[i].lora (its rank), else the plan's LoRA lever (rank 16)
    rank = agent.lora.r if agent.lora is not None else ar.LORA_TARGETS_RANK
    lora = s.lora or agent.lora is not None
    trained = ar.agent_items(f, work, sharding, freeze_vision=s.freeze_vision, lora=lora, lora_rank=rank)
    if lora:
        count, trained_wb = ar.lora_parameters(f, rank), ar.LORA_BYTES
    else:
        count, trained_wb = f.parameters - (f.vision_parameters if s.freeze_vision else 0), wb
    items = {
        "cuda_context": ar.CUDA_CONTEXT,
        "reference_model": ar.reference_model(f.parameters, wb, beta=cfg.grpo.beta, lora=lora),
        **trained,
        "init_transient": ar.init_transient(trained, f.parameters * wb, count, trained_wb, sharding),
        # vLLM's sync streams one gathered parameter at a time; LoRA merging and HF engines gather all
        "sync_gather": ar.sync_gather(f, wb, sharding, streamed=cfg.rollout.engine != "hf" and not lora),
    }
    plan = AgentPlan(
        agent.name,
        agent.model,
        gpus[0],
        len(gpus),
        items,
        activation_settings=_activation_settings(f, work),
        devices=[f"cuda:{g}" for g in gpus],
        turns_with=[cfg.agents[j].name for j in layout.turns_with(index)],
        dtype=dtype,
        sequences=math.ceil(cfg.data.problems_per_step * cfg.grpo.k / len(gpus)),  # each rank's share
    )
    weights = f.parameters * wb
    if cfg.rollout.engine in ("vllm", "auto"):
        kv_one = ar.kv_cache(
            f, vllm_len(cfg.rollout, cfg.grpo.max_new_tokens, seq), wb
        )  # one full sequence at the engine's context
        share = int(s.gpu_memory_utilization * s.gpu_memory)
        plan.vllm_needed = weights + kv_one + ar.VLLM_OVERHEAD
        plan.concurrent = ar.vllm_concurrency(weights, kv_one, share, plan.sequences)
        asleep = cfg.rollout.sleep_between_phases
        items["vllm_share"] = share
        items["vllm_weights"] = weights if asleep else 0  # woken alone for the sync (a level-2 sleep)
        items["vllm_asleep"] = ar.VLLM_ASLEEP if asleep else share
    else:
        batch = min(cfg.rollout.batch_size, plan.sequences // cfg.grpo.k or 1) * cfg.grpo.k
        items["hf_kv_cache"] = ar.kv_cache(f, seq, wb) * batch
        plan.concurrent = batch
    plan.items = {k: items[k] for k in ITEM_ORDER if k in items}
    return plan


def _activation_settings(f: Any, work: ar.Workload) -> dict[str, int]:
    """Both checkpointing settings' activations (the peak counts the configured one)."""
    other = dataclasses.replace(work, checkpointing=not work.checkpointing)
    on, off = (work, other) if work.checkpointing else (other, work)
    return {"checkpointing_on": ar.activations(f, on), "checkpointing_off": ar.activations(f, off)}


def _notes(cfg: Any, s: Settings, layout: ProcessLayout, agents: list[AgentPlan]) -> list[str]:
    notes = [
        f"weights in {', '.join(dict.fromkeys(a.dtype for a in agents))} (adapter_kwargs.dtype resolved on "
        f"CUDA; auto is bfloat16); one CUDA context of {ar.CUDA_CONTEXT / ar.GIB:.1f} GiB per process"
    ]
    if layout.turns:
        notes.append(
            "agents sharing a GPU take turns: the idle ones keep their context, weights and a sleeping engine "
            "there; their fp32 masters and AdamW moments wait in host memory"
        )
    if any(a.devices for a in cfg.agents):
        notes.append(
            "agents[i].devices (a one-process override) is not planned: the plan uses the layout above"
        )
    if cfg.grpo.beta > 0:
        notes.append(
            f"grpo.beta={cfg.grpo.beta:g}: a frozen copy of each full fine-tuned model (the KL reference) on "
            "every GPU; a LoRA agent's reference is its base (no copy); it scores every step's completions once "
            "(no grad), and with grpo.kl_placement=reward the trainer scores them once more before the rewards"
        )
    if cfg.train.gradient_checkpointing is None:
        notes.append("train.gradient_checkpointing unset: on, the GPU default")
    if s.disable_dropout:
        notes.append("train.disable_dropout: every dropout probability is 0 from the start of training")
    if cfg.rollout.engine in ("vllm", "auto"):
        given = cfg.rollout.max_model_len
        max_len = PROMPT_TEXT_TOKENS + cfg.grpo.max_new_tokens
        length = (
            f"{given} (rollout.max_model_len)" if given else f"{max_len} + image tokens + margin (estimated)"
        )
        notes.append(
            f"vLLM max_model_len {length}; an engine needs KV cache for one full sequence, vLLM queues the "
            "sequences its share does not hold at once"
        )
    return notes


def vllm_len(rollout: Any, max_new_tokens: int, seq: int) -> int:
    """The context the engine is built with: ``rollout.max_model_len``, else what the trainer computes from the
    longest prompt (:func:`~corl_vl.rollout.sizing.default_max_model_len`), here with the plan's estimated
    prompt (text + one image's tokens)."""
    if rollout.max_model_len is not None:
        return int(rollout.max_model_len)
    return default_max_model_len(seq - max_new_tokens, max_new_tokens)


def torch_backend(s: Settings) -> bool:
    """No ZeRO stage (no ``distributed.deepspeed``): each agent trains in one process with the Torch backend
    (whose ``optimizer.offload`` is its own); with a ZeRO stage each GPU of an agent's block is a DeepSpeed rank."""
    return s.zero_stage == 0


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
