"""What benchmarks/gpu/validate.py can run where: its sections, environment descriptions, and the plan.

Why a plan apart from the run: a GPU lease is short (about 15 minutes in all, 10 per command), so what will run,
what is skipped and why, and how long it should take are known before the machine starts (``--dry-run``),
from a description of the machine (which packages, how many GPUs, how much memory) and of this checkout (which
of the things a section drives exist yet).

The estimates are planning numbers for one H200 (model build, the section's work and its subprocess start-up),
not measurements; each run records the seconds every section really took, to replace them with.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PAIR = ("qwen2.5-vl-3b", "internvl3.5-2b")
FAMILIES = (*PAIR, "gemma-3-4b", "qwen2.5-3b")
TINY_PAIR = ("tiny-qwen2.5-vl", "tiny-internvl3.5")
TINY_FAMILIES = (*TINY_PAIR, "tiny-gemma3", "tiny-llama3")
RANDOM_SUFFIX = "@random"  # full-size architecture, random weights, no download (issue #23's presets)


@dataclass(frozen=True)
class Section:
    """One part of the validation. ``code``: what this checkout must have (keys of :data:`CODE`)."""

    name: str
    checks: str
    packages: tuple[str, ...] = ("torch", "transformers")
    gpus: int = 0  # minimum number of GPUs; 0: it also runs on CPU, as its tiny subset
    gpu_memory_gib: float = 0.0
    code: tuple[str, ...] = ()
    estimate_s: float = 60.0
    shares: str | None = None  # a section whose runs give this one's results too (then it costs nothing more)


# in run order: the sections that need only torch + transformers (+ peft) first
SECTIONS: tuple[Section, ...] = (
    Section(
        "pair_memory",
        "each agent of the pair at full size in bf16, 2 HF-engine training steps at K = 4 and "
        "256 new tokens: peak GPU memory per agent next to `corl-vl plan`'s prediction",
        gpu_memory_gib=80,
        code=("random_presets", "hf_checks"),
        estimate_s=150,
    ),
    Section(
        "pair_turns",
        "the pair as `corl-vl train` runs it on one GPU: two processes taking turns (HF engine, full size, bf16, "
        "each agent's own NCCL world, JSON control plane), 2 steps: peak memory next to `corl-vl plan`'s",
        gpu_memory_gib=80,
        code=("random_presets", "process_turns", "turns_check"),
        estimate_s=110,
    ),
    Section(
        "logprob_tail",
        "peak memory of the logprob tail, bf16 forward + backward over 8 × 1,024 completion "
        "tokens at V = 151,936 (one layer of width 2,048)",
        code=("tail_check",),
        estimate_s=40,
    ),
    Section(
        "lora",
        "LoRA (r = 16) and frozen-vision-tower variants of each agent of the pair, one HF-engine step each: "
        "trained parameters, peak memory next to `corl-vl plan`'s, frozen weights bit-identical",
        packages=("torch", "transformers", "peft"),
        gpus=1,
        gpu_memory_gib=40,
        code=("random_presets", "lora", "lora_check"),
        estimate_s=100,
    ),
    Section(
        "throughput",
        "HF rollout tokens/s and update tokens/s of each agent of the pair at full size "
        "(from pair_memory's runs when both run)",
        gpu_memory_gib=80,
        code=("random_presets", "hf_checks"),
        estimate_s=150,
        shares="pair_memory",
    ),
    Section(
        "hf_drift",
        "bf16 drift between the HF rollout's own logprobs and the trainer's forward, per family "
        "(mean / p99 nats per token, importance-ratio statistics)",
        gpu_memory_gib=40,
        code=("random_presets", "hf_checks"),
        estimate_s=80,
    ),
    Section(
        "sync",
        "vLLM sleep / wake / sync order through real cohort steps (engine sized as training sizes it: "
        "max_model_len, sleep level 2), every sync's weight checksum, logprob parity after a sync",
        packages=("torch", "transformers", "vllm"),
        estimate_s=90,
    ),
    Section(
        "drift",
        "bf16 drift between vLLM's rollout logprobs and the trainer's, per family with weights in "
        "the local HF cache",
        packages=("torch", "transformers", "vllm"),
        estimate_s=120,
    ),
    Section(
        "torchrun",
        "2 agents × 1 GPU under torchrun, ZeRO-3 over NCCL, 3 steps, then --resume",
        packages=("torch", "transformers", "deepspeed"),
        gpus=2,
        estimate_s=180,
    ),
    Section(
        "uneven_placement",
        "2 agents on 2 + 1 GPUs under torchrun (tests/dist_worker.py, ZeRO-3 over NCCL, 2 steps): the placement "
        "asked for, the same answers and labels on every rank, each agent's reward shares split among its ranks",
        packages=("torch", "transformers", "deepspeed"),
        gpus=3,  # the smallest cohort whose agents have different group sizes
        code=("agent_gpus",),
        estimate_s=150,
    ),
    Section(
        "tp_rollout",
        "1 agent on 2 GPUs, rollout.tensor_parallel_size=2 (vLLM external_launcher): a rollout, an update, a "
        "weight sync, a rollout; both ranks of the TP group sample the same tokens",
        packages=("torch", "transformers", "deepspeed", "vllm"),
        gpus=2,
        code=("rollout_tp",),
        estimate_s=180,
    ),
)
BY_NAME = {s.name: s for s in SECTIONS}


def _preset_exists(name: str) -> bool:
    try:
        from model_adapters.presets import get_preset

        get_preset(name)
    except Exception:  # an unknown preset raises CorlError; an older checkout may lack the module's names
        return False
    return True


def _config_field(cls_name: str, name: str) -> bool:
    from corl_vl import config

    cls = getattr(config, cls_name, None)
    return cls is not None and name in {f.name for f in dataclasses.fields(cls)}


def _check_exists(module: str, function: str) -> bool:
    here = Path(__file__).resolve().parent
    path = here / f"{module}.py"
    return path.exists() and f"def {function}(" in path.read_text()


def _module_has(module: str, text: str) -> bool:
    """Whether ``module``'s source (found, not imported) contains ``text``."""
    spec = importlib.util.find_spec(module)
    origin = spec.origin if spec is not None else None
    return origin is not None and text in Path(origin).read_text()


# what a section may need from this checkout: (in words, for the skip line; detector)
CODE: dict[str, tuple[str, Callable[[], bool]]] = {
    "random_presets": (
        "the full-size random presets (qwen2.5-vl-3b@random …, issue #23)",
        lambda: all(_preset_exists(p + RANDOM_SUFFIX) for p in PAIR),
    ),
    "process_turns": (
        "one process per agent taking turns on a shared GPU (corl_vl.train.device_turns, issue #39)",
        lambda: _module_has("corl_vl.train.device_turns", "class DeviceTurns")
        and _module_has("corl_vl.train.distributed", "NODE_GPUS_ENV"),
    ),
    "lora": (
        "LoRA and frozen parts (agents[i].lora, train.freeze, issue #23)",
        lambda: _config_field("AgentConfig", "lora") and _config_field("TrainConfig", "freeze"),
    ),
    "hf_checks": ("the HF-engine check (checks_hf.hf_agent)", lambda: _check_exists("checks_hf", "hf_agent")),
    "turns_check": (
        "the pair-turns check (checks_turns.pair_turns)",
        lambda: _check_exists("checks_turns", "pair_turns"),
    ),
    "agent_gpus": (
        "per-agent GPU counts (agents[i].gpus, issue #27)",
        lambda: _config_field("AgentConfig", "gpus"),
    ),
    "rollout_tp": (
        "rollout tensor parallelism (rollout.tensor_parallel_size, issue #27)",
        lambda: _config_field("RolloutConfig", "tensor_parallel_size"),
    ),
    "tail_check": (
        "the logprob-tail check (checks_hf.logprob_tail)",
        lambda: _check_exists("checks_hf", "logprob_tail"),
    ),
    "lora_check": (
        "a LoRA check in benchmarks/gpu (written with issue #23's LoRA)",
        lambda: _check_exists("checks_hf", "lora"),
    ),
}


GPU_ONLY_CODE = frozenset({"random_presets"})


def code_here() -> frozenset[str]:
    """The :data:`CODE` keys this checkout has."""
    return frozenset(key for key, (_, present) in CODE.items() if present())


@dataclass(frozen=True)
class Environment:
    """A machine as the plan sees it."""

    name: str
    gpus: int
    gpu_memory_gib: float
    packages: frozenset[str] = field(default_factory=frozenset)


IMAGE_PACKAGES = frozenset(
    {
        "torch",
        "transformers",
        "accelerate",
        "peft",
        "timm",
        "safetensors",
        "math_verify",
        "qwen_vl_utils",
        "rich",
    }
)  # the image + the bundle
ENVIRONMENTS = {
    "h200-image": Environment(
        "1 × H200 (139 GiB), the fixed image + the wheel bundle", 1, 139.0, IMAGE_PACKAGES
    ),
}
KNOWN_PACKAGES = (
    "torch",
    "transformers",
    "accelerate",
    "peft",
    "timm",
    "safetensors",
    "vllm",
    "deepspeed",
    "datasets",
    "math_verify",
    "qwen_vl_utils",
    "rich",
)


def environment_here() -> Environment:
    """This machine: its GPUs (torch), their memory, and which of :data:`KNOWN_PACKAGES` import."""
    import torch

    gpus = torch.cuda.device_count()
    memory = torch.cuda.get_device_properties(0).total_memory / 2**30 if gpus else 0.0
    packages = frozenset(p for p in KNOWN_PACKAGES if importlib.util.find_spec(p) is not None)
    return Environment("this machine", gpus, round(memory, 1), packages)


def load_environment(spec: str) -> Environment:
    """A named description (:data:`ENVIRONMENTS`), ``here``, or a JSON file with gpus, gpu_memory_gib, packages."""
    if spec == "here":
        return environment_here()
    if spec in ENVIRONMENTS:
        return ENVIRONMENTS[spec]
    path = Path(spec)
    if not path.exists():
        raise SystemExit(f"--env {spec}: neither a file nor one of here, {', '.join(ENVIRONMENTS)}")
    try:
        raw = json.loads(path.read_text())
        return Environment(
            str(raw.get("name", path.stem)),
            int(raw["gpus"]),
            float(raw["gpu_memory_gib"]),
            frozenset(raw["packages"]),
        )
    except (ValueError, KeyError, TypeError) as err:
        raise SystemExit(
            f"{path}: needs JSON with gpus, gpu_memory_gib and packages (a list): {err}"
        ) from err


@dataclass
class Plan:
    run: list[Section]
    skipped: list[dict[str, str]]  # {"section", "checks", "reason"}; per-model skips add "label"

    @property
    def estimate_s(self) -> float:
        return sum(self.cost(s) for s in self.run)

    def cost(self, section: Section) -> float:
        """``section``'s estimate, 0 when a section it shares runs with is already in the plan."""
        shared = section.shares is not None and any(s.name == section.shares for s in self.run)
        return 0.0 if shared else section.estimate_s


def why_not(section: Section, env: Environment, code: frozenset[str]) -> str | None:
    """The reason ``section`` cannot run in ``env`` with this checkout's ``code``, or None."""
    missing = [p for p in section.packages if p not in env.packages]
    if missing:
        return f"needs {', '.join(missing)} (not installed)"
    if env.gpus < section.gpus:
        return f"needs {section.gpus} GPU(s), has {env.gpus}"
    if env.gpus and env.gpu_memory_gib < section.gpu_memory_gib:
        return f"needs ≥ {section.gpu_memory_gib:g} GiB per GPU, has {env.gpu_memory_gib:g}"
    # the CPU subset runs tiny models: it needs no full-size presets
    needed = [c for c in section.code if env.gpus or c not in GPU_ONLY_CODE]
    absent = [CODE[c][0] for c in needed if c not in code]
    if absent:
        return "needs " + "; ".join(absent) + " — not in this checkout"
    return None


def make_plan(env: Environment, code: frozenset[str], names: Iterable[str], budget_s: float) -> Plan:
    """The sections of ``names`` (in :data:`SECTIONS` order) that can run, within ``budget_s`` by estimate."""
    wanted = list(names)
    unknown = [n for n in wanted if n not in BY_NAME]
    if unknown:
        raise SystemExit(f"--sections: unknown {', '.join(unknown)}; choose from {', '.join(BY_NAME)}")
    plan = Plan([], [])
    for section in SECTIONS:
        reason = why_not(section, env, code) if section.name in wanted else "not in --sections"
        if reason is None and plan.estimate_s + plan.cost(section) > budget_s:
            reason = f"over --budget-s {budget_s:g} (≈ {plan.cost(section):g} s more)"
        if reason is None:
            plan.run.append(section)
        else:
            plan.skipped.append({"section": section.name, "checks": section.checks, "reason": reason})
    return plan


def describe(plan: Plan, env: Environment, budget_s: float) -> str:
    """The dry run's text: what runs, what is skipped and why, the estimated total."""
    lines = [
        f"environment: {env.name}: {env.gpus} GPU(s) × {env.gpu_memory_gib:g} GiB, packages: "
        f"{', '.join(sorted(env.packages)) or 'none'}",
        "would run:",
    ]
    lines += [f"  {s.name:<16} ≈ {plan.cost(s):>4.0f} s  {s.checks}" for s in plan.run] or ["  (nothing)"]
    lines.append("skipped:")
    lines += [f"  {s['section']:<16} {s['reason']}" for s in plan.skipped] or ["  (nothing)"]
    lines.append(f"estimated total: {plan.estimate_s:.0f} s of a {budget_s:.0f} s budget (planning numbers)")
    return "\n".join(lines)


def payload_models(section: str, on_gpu: bool) -> tuple[str, ...]:
    """The models a section runs: the full-size random pair / families on a GPU, their tiny models on CPU."""
    families = FAMILIES if section == "hf_drift" else PAIR
    tiny = TINY_FAMILIES if section == "hf_drift" else TINY_PAIR
    return tuple(f + RANDOM_SUFFIX for f in families) if on_gpu else tiny


def as_dict(section: Section) -> dict[str, Any]:
    return dataclasses.asdict(section)
