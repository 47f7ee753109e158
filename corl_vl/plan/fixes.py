"""The plan's levers (cheapest first) and the search that stacks them until a config fits (``corl-vl plan``'s
fixes and ``corl-vl train``'s "first fix")."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

from . import arithmetic as ar
from .planner import Settings, plan_settings, torch_backend

LEVERS: list[tuple[str, Callable[[Settings, Any], Settings | None]]] = [
    (
        "grpo.micro_batch_size=1",
        lambda s, c: dataclasses.replace(s, micro_batch=1) if s.micro_batch > 1 else None,
    ),
    (
        "train.gradient_checkpointing=true",
        lambda s, c: None if s.checkpointing else dataclasses.replace(s, checkpointing=True),
    ),
    (
        "ZeRO-3 over each agent's GPUs (distributed.deepspeed: configs/deepspeed/zero3.json)",
        lambda s, c: dataclasses.replace(s, zero_stage=3)
        if s.zero_stage < 3 and s.gpus >= 2 * len(c.agents)
        else None,
    ),
    (
        "optimizer.offload=cpu",
        lambda s, c: None
        if s.offload_optimizer or not torch_backend(s)
        else dataclasses.replace(s, offload_optimizer=True),
    ),
    (
        "DeepSpeed optimizer offload (zero_optimization.offload_optimizer.device: cpu)",
        lambda s, c: None
        if s.offload_optimizer or torch_backend(s)
        else dataclasses.replace(s, offload_optimizer=True, zero_stage=max(2, s.zero_stage)),
    ),
    (
        "train.freeze=[vision_tower, projector]",
        lambda s, c: None if s.freeze_vision else dataclasses.replace(s, freeze_vision=True),
    ),
    (
        f"agents[i].lora={{r: {ar.LORA_TARGETS_RANK}}} (LoRA on the language model's projections)",
        lambda s, c: None if s.lora else dataclasses.replace(s, lora=True),
    ),
]


def cheapest_fixes(cfg: Any, settings: Settings, facts: list[Any]) -> list[dict[str, Any]]:
    """Each lever alone and stacked on the earlier ones that helped (cheapest first), then the fewest GPUs."""
    out: list[dict[str, Any]] = []
    base = plan_settings(cfg, settings, facts)
    current, best = settings, max(base.device_peak.values())
    stacked_changes: list[str] = []
    levers = list(LEVERS)
    needed = max(a.vllm_needed for a in base.agents)
    if needed:  # vLLM's share sized to what its weights and KV cache need (up or down), in steps of 0.05
        share = min(0.95, math.ceil(needed / settings.gpu_memory * 20) / 20)
        if share != settings.gpu_memory_utilization:
            change = f"rollout.gpu_memory_utilization={share:.2f}"
            levers.insert(1, (change, lambda s, c: dataclasses.replace(s, gpu_memory_utilization=share)))
    for change, lever in levers:
        alone = lever(settings, cfg)
        if alone is None:
            continue
        single = plan_settings(cfg, alone, facts)
        stacked_settings = lever(current, cfg) or current
        stacked = plan_settings(cfg, stacked_settings, facts)
        if max(stacked.device_peak.values()) < best:  # only levers that lower the peak are stacked
            current, best = stacked_settings, max(stacked.device_peak.values())
            stacked_changes.append(change)
        out.append(
            {
                "change": change,
                "fits": single.fits,
                "peak_gib": round(max(single.device_peak.values()) / ar.GIB, 2),
                "stacked": " + ".join(stacked_changes),
                "stacked_fits": stacked.fits,
                "stacked_peak_gib": round(best / ar.GIB, 2),
            }
        )
    for gpus in range(settings.gpus + 1, 65):
        more = plan_settings(cfg, dataclasses.replace(settings, gpus=gpus), facts)
        if more.fits:
            out.append(
                {
                    "change": f"{gpus} GPUs",
                    "fits": True,
                    "peak_gib": round(max(more.device_peak.values()) / ar.GIB, 2),
                }
            )
            break
    return out
