"""The ``placement`` check: both agents of the pair time-shared on one device (torch + transformers only).

:func:`placement` builds the pair through the trainer's own placement with one visible device, so the agents
take turns on it and each idle agent's optimizer state and fp32 masters wait in CPU memory
(``corl_vl.train.offload``). It runs real ``Cohort.step`` calls (HF engine, RENT reward: every completion
trains) and records, per agent and turn, the memory allocated when its update starts (its state reloaded) and
the peak of the update, the memory left allocated between steps (both agents idle), the bytes each offload
moved, the step times, and ``corl-vl plan``'s device peak for the same config on this GPU. Memory figures are
CUDA counters: ``None`` on CPU, where the check runs the tiny pair on an injected ``["cpu"]`` device.
"""

from __future__ import annotations

import time
from typing import Any

from checks import _device, _problems

GIB = 2**30


def placement(
    models: list[str],
    *,
    dtype: str = "bfloat16",
    problems: int = 2,
    k: int = 2,
    max_new_tokens: int = 64,
    steps: int = 2,
    micro_batch_size: int = 2,
) -> dict[str, Any]:
    """``steps`` cohort steps of the agents of ``models`` sharing one device (module docstring)."""
    import torch

    from corl_vl.config import config_from_dict
    from corl_vl.plan import plan_for_config
    from corl_vl.recipe import build_cohort
    from model_adapters.registry import create_adapter

    cfg = config_from_dict(
        {
            "agents": [
                {"name": f"agent{i}", "model": m, "adapter_kwargs": {"dtype": dtype}}
                for i, m in enumerate(models)
            ],
            "data": {"limit": problems, "problems_per_step": problems},
            "grpo": {"k": k, "max_new_tokens": max_new_tokens, "micro_batch_size": micro_batch_size},
            "rollout": {"engine": "hf", "batch_size": problems},
            "reward": {"name": "rent"},
            "train": {"lr": 1e-6, "warmup_ratio": 0, "scheduler": "constant", "max_steps": steps},
        }
    )
    cuda = _device() == "cuda"
    device = "cuda:0" if cuda else "cpu"
    view = _problems(create_adapter(models[0], dtype=dtype), problems, seed=7)  # no weights load here
    cohort = build_cohort(cfg, problems=view, visible_devices=[device])
    turns: dict[str, list[dict[str, float | None]]] = {a.name: [] for a in cohort.agents}

    def measured(agent: Any, update: Any) -> Any:
        def run(*args: Any, **kwargs: Any) -> Any:
            start = None
            if cuda:
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
                start = torch.cuda.memory_allocated() / GIB
            out = update(*args, **kwargs)
            if cuda:
                torch.cuda.synchronize()
            peak = torch.cuda.max_memory_allocated() / GIB if cuda else None
            turns[agent.name].append({"start_gib": start, "peak_gib": peak})
            return out

        return run

    for agent in cohort.agents:  # the turn's state is reloaded before update() runs (Cohort._update_one)
        agent.update = measured(agent, agent.update)
    history, idle, seconds = [], [], []
    for _ in range(steps):
        t0 = time.perf_counter()
        history.append(cohort.step())
        seconds.append(time.perf_counter() - t0)
        idle.append(torch.cuda.memory_allocated() / GIB if cuda else None)
    plan = None
    if cuda:
        predicted = plan_for_config(cfg, 1, int(torch.cuda.get_device_properties(0).total_memory))
        plan = {"device_peak_gib": predicted.device_peak[0] / GIB, "fits": predicted.fits}
    offloads = cohort.offloads
    trained = all(m[a.name]["update/skipped"] == 0.0 for m in history for a in cohort.agents)
    return {
        "models": list(models),
        "dtype": dtype,
        "device": device,
        "lanes": cohort.phases.lanes,
        "turns": turns,
        "idle_gib": idle,
        "offloaded_gib": {name: o.moved_bytes / GIB for name, o in offloads.items()},
        "step_s": seconds,
        "plan": plan,
        "ok": trained
        and cohort.phases.lanes == [list(range(len(models)))]
        and all(o.away and o.turns == steps for o in offloads.values())
        and len(offloads) == len(models),
    }
