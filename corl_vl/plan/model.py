"""What a memory plan is made of: its settings, each agent's items and phase peaks, the verdict and its JSON.

Split from :mod:`corl_vl.plan.planner` (which computes them) so each file reads on its own.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from . import arithmetic as ar
from .layout import ProcessLayout


@dataclass(frozen=True)
class Settings:
    """What the plan varies: the config's values and the levers applied on top of them."""

    gpus: int
    gpu_memory: int  # bytes per GPU
    micro_batch: int
    checkpointing: bool
    zero_stage: int  # 0: no DeepSpeed (one process per agent); 1-3: a ZeRO engine over each agent's block
    offload_optimizer: bool = False
    freeze_vision: bool = False
    lora: bool = False
    gpu_memory_utilization: float = 0.45
    disable_dropout: bool = True


@dataclass
class AgentPlan:
    name: str
    model: str
    device: int  # first GPU of its block
    ranks: int  # processes (one per GPU of its block)
    items: dict[str, int]  # bytes on each of its GPUs, in one of its processes
    activation_settings: dict[str, int] = field(default_factory=dict)  # with / without checkpointing
    vllm_needed: int = 0  # vLLM weights + KV cache of one full sequence + overhead (must fit its share)
    devices: list[str] = field(default_factory=list)  # its GPUs, cuda:N
    turns_with: list[str] = field(default_factory=list)  # agents it takes turns with on its GPU
    dtype: str = "bfloat16"  # the weights' dtype the plan assumed (resolve_dtype on CUDA)
    sequences: int = 0  # sequences one of its engines generates per step
    concurrent: int = 0  # how many of them its KV cache holds at once (vLLM queues the rest)

    @property
    def phases(self) -> dict[str, int]:
        """Its peak in each phase of its turn (:func:`~corl_vl.plan.arithmetic.phase_peaks`)."""
        return ar.phase_peaks(self.items, takes_turns=bool(self.turns_with))

    @property
    def peak(self) -> int:
        return max(self.phases.values())

    @property
    def update_peak(self) -> int:
        return self.phases["update"]

    @property
    def rollout_peak(self) -> int:
        return max(self.phases["rollout"], self.phases["sync"])

    @property
    def idle(self) -> int:
        """What it leaves on a shared GPU while another agent has its turn."""
        return ar.idle_bytes(self.items)


def _gib(value: int, digits: int = 2) -> float:
    return round(value / ar.GIB, digits)


@dataclass
class Plan:
    """The verdict: ``fits``, per-GPU peaks, the shortfall and the cheapest changes that make it fit."""

    settings: Settings
    agents: list[AgentPlan]
    device_peak: dict[int, int]
    layout: ProcessLayout | None = None
    notes: list[str] = field(default_factory=list)
    fixes: list[dict[str, Any]] = field(default_factory=list)

    @property
    def fits(self) -> bool:
        return self.shortfall == 0 and all(
            a.vllm_needed <= a.items.get("vllm_share", a.vllm_needed) for a in self.agents
        )

    @property
    def shortfall(self) -> int:
        return max(0, max(self.device_peak.values()) - self.settings.gpu_memory)

    @property
    def dtype(self) -> str:
        """The weights' dtype the plan assumed: one name, or the agents' names joined when they differ."""
        names = list(dict.fromkeys(a.dtype for a in self.agents))
        return ",".join(names)

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
            a = max(self.agents, key=lambda a: a.vllm_needed - a.items.get("vllm_share", 0))
            why = (
                f"agent {a.name}'s vLLM engine needs {a.vllm_needed / ar.GIB:.1f} GiB for one full sequence, its "
                f"share (rollout.gpu_memory_utilization) is {a.items.get('vllm_share', 0) / ar.GIB:.1f} GiB"
            )
        fix = self.first_fix or "none of the plan's levers is enough"
        return (
            f"memory plan: the run does not fit on {where}: {why}; first fix: {fix} (details: corl-vl plan)"
        )

    def layout_dict(self) -> dict[str, Any]:
        names = [a.name for a in self.agents]
        lay = self.layout
        if lay is None:
            return {}
        return {
            "deepspeed": lay.deepspeed,
            "processes": [{"agent": names[a], "gpu": g} for a, g in lay.processes],
            "takes_turns": [[names[a] for a in lane] for lane in lay.turns],
            "leftover_gpus": lay.leftover,
            "description": lay.describe(names),
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "fits": self.fits,
            "dtype": self.dtype,
            "shortfall_gib": _gib(self.shortfall),
            "settings": {
                **dataclasses.asdict(self.settings),
                "gpu_memory_gib": self.settings.gpu_memory / ar.GIB,
            },
            "layout": self.layout_dict(),
            "devices": {str(d): _gib(b) for d, b in self.device_peak.items()},
            "agents": [
                {
                    "name": a.name,
                    "model": a.model,
                    "dtype": a.dtype,
                    "device": a.device,
                    "ranks": a.ranks,
                    "devices": a.devices,
                    "takes_turns_with": a.turns_with,
                    "peak_gib": _gib(a.peak),
                    "phases_gib": {k: _gib(v) for k, v in a.phases.items()},
                    "idle_gib": _gib(a.idle),
                    "vllm_needed_gib": _gib(a.vllm_needed),
                    "sequences": a.sequences,
                    "concurrent_sequences": a.concurrent,
                    "items_gib": {k: _gib(v, 3) for k, v in a.items.items()},
                    "activations_gib": {k: _gib(v, 3) for k, v in a.activation_settings.items()},
                }
                for a in self.agents
            ],
            "fixes": self.fixes,
            "first_fix": self.first_fix,
            "notes": self.notes,
        }
