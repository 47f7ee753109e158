"""``corl-vl plan``: the memory plan of a config or ``--pair`` on G GPUs, before any model loads.

Per agent it shows the processes ``corl-vl train`` launches (which GPU, who takes turns), the dtype it assumed,
each phase's peak (rollout, weight sync, update, DeepSpeed init) and the items they are made of (CUDA context,
weights, KL reference, masters, gradients, optimizer state, activations, vLLM's share awake and asleep), gives the
verdict (fits / short by how much) and the cheapest changes that make it fit (:mod:`corl_vl.plan`). Exit code 0
when it fits, 1 when it does not.

    corl-vl plan --pair A,B --gpus 2 --gpu-memory 80GB      # presets: corl-vl models list
    corl-vl plan --config configs/pairs/FILE.yaml --gpus 8 --json
"""

from __future__ import annotations

import argparse
import json

from corl_vl.errors import CorlError


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "plan", help="memory plan per agent and GPU: does the run fit, and the fixes"
    )
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--config", metavar="FILE", help="cohort YAML (see configs/)")
    source.add_argument("--pair", metavar="A,B[,C]", help="comma-separated model presets")
    parser.add_argument("--gpus", type=int, default=None, help="GPUs to plan for (default: the visible ones)")
    parser.add_argument(
        "--gpu-memory", default=None, help="memory per GPU, e.g. 80GB (default: the first GPU's)"
    )
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--json", action="store_true", help="print the plan as JSON")
    parser.set_defaults(func=run)


def _visible_gpus() -> tuple[int, int]:
    """(count, bytes of the first) of the visible CUDA devices; (0, 0) without any."""
    # lazy: torch
    import torch

    if not torch.cuda.is_available() or torch.cuda.device_count() == 0:
        return 0, 0
    return torch.cuda.device_count(), int(torch.cuda.get_device_properties(0).total_memory)


def run(args: argparse.Namespace) -> int:
    # lazy: PIL, cli-help, numpy, tokenizers
    from corl_vl.config import load_config, pair_config
    from corl_vl.plan import parse_memory, plan_for_config

    if args.config:
        cfg = load_config(args.config, args.overrides)
    else:
        cfg = pair_config([p.strip() for p in args.pair.split(",")], args.overrides)
    gpus, memory = args.gpus, parse_memory(args.gpu_memory) if args.gpu_memory else None
    if gpus is None or memory is None:
        seen, seen_memory = _visible_gpus()
        gpus = gpus if gpus is not None else seen
        memory = memory if memory is not None else seen_memory
    if not gpus or not memory:
        raise CorlError("plan: no GPU visible; pass --gpus N --gpu-memory 80GB")
    plan = plan_for_config(cfg, gpus, memory)
    if args.json:
        print(json.dumps(plan.to_dict(), indent=1))
    else:
        print(render(plan))
    return 0 if plan.fits else 1


def render(plan) -> str:
    """The plan in a few lines per agent: where its processes run, each phase's peak, the non-zero items."""
    data = plan.to_dict()
    s = data["settings"]
    lines = [
        f"memory plan: {s['gpus']} GPU(s) × {s['gpu_memory_gib']:.0f} GiB, weights {data['dtype']}, micro-batch "
        f"{s['micro_batch']}, checkpointing {'on' if s['checkpointing'] else 'off'}, "
        + (f"DeepSpeed ZeRO-{s['zero_stage']}" if s["zero_stage"] else "no DeepSpeed")
    ]
    lines.extend(f"  layout: {line}" for line in data["layout"].get("description", []))
    for agent in data["agents"]:
        p = agent["phases_gib"]
        lines.append(
            f"  {agent['name']} ({agent['model']}, {agent['dtype']}): peak {agent['peak_gib']:.1f} GiB per GPU: "
            f"rollout {p['rollout']:.1f}, sync {p['sync']:.1f}, update {p['update']:.1f}"
            + (f", init {p['init']:.1f}" if agent["items_gib"].get("init_transient") else "")
            + (f"; idle {agent['idle_gib']:.1f}" if agent["takes_turns_with"] else "")
        )
        items = [f"{k} {v:.2f}" for k, v in agent["items_gib"].items() if v]
        lines.append(f"      {', '.join(items)} GiB")
        acts = agent["activations_gib"]
        lines.append(
            f"      activations {acts['checkpointing_on']:.2f} GiB with checkpointing, "
            f"{acts['checkpointing_off']:.2f} without"
        )
        if agent["vllm_needed_gib"]:
            lines.append(
                f"      vLLM: {agent['vllm_needed_gib']:.2f} GiB for one full sequence of its "
                f"{agent['items_gib']['vllm_share']:.1f} GiB share; {agent['concurrent_sequences']} of "
                f"{agent['sequences']} sequences at once; prefix caching and the multi-modal processor cache "
                "on (a problem's K samples share its prompt's KV blocks and picture)"
            )
    lines.append("  GPUs: " + ", ".join(f"{d}: {gib:.1f} GiB" for d, gib in data["devices"].items()))
    lines.extend(f"  note: {n}" for n in data["notes"])
    if data["fits"]:
        lines.append("verdict: fits")
        return "\n".join(lines)
    lines.append(f"verdict: does not fit (short by {data['shortfall_gib']:.1f} GiB on the fullest GPU)")
    for fix in data["fixes"]:
        mark = "fits" if fix["fits"] else "not enough"
        lines.append(f"  fix: {fix['change']}: peak {fix['peak_gib']:.1f} GiB ({mark})")
    if data["first_fix"]:
        lines.append(f"first fix: {data['first_fix']}")
    return "\n".join(lines)
