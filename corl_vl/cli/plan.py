"""``corl-vl plan``: the memory plan of a config or ``--pair`` on G GPUs, before any model loads.

Per agent and device it itemises weights, master copies, gradients, optimizer state, activations, the vision
tower's share, the logprob tail and vLLM's reserved share, gives the verdict (fits / short by how much) and the
cheapest changes that make it fit (:mod:`corl_vl.plan`). Exit code 0 when it fits, 1 when it does not.

    corl-vl plan --pair A,B --gpus 2 --gpu-memory 80GB      # presets: corl-vl models list
    corl-vl plan --config configs/pairs/FILE.yaml --gpus 8 --json
"""

from __future__ import annotations

import argparse
import json


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
    import torch

    if not torch.cuda.is_available() or torch.cuda.device_count() == 0:
        return 0, 0
    return torch.cuda.device_count(), int(torch.cuda.get_device_properties(0).total_memory)


def run(args: argparse.Namespace) -> int:
    from corl_vl.config import load_config, pair_config
    from corl_vl.errors import CorlError
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
    data = plan.to_dict()
    s = data["settings"]
    lines = [
        f"memory plan: {s['gpus']} GPU(s) × {s['gpu_memory_gib']:.0f} GiB, micro-batch {s['micro_batch']}, "
        f"checkpointing {'on' if s['checkpointing'] else 'off'}, ZeRO stage {s['zero_stage']}, "
        f"dropout {'zeroed' if s['disable_dropout'] else 'as the model has it'}"
    ]
    for agent in data["agents"]:
        turns = agent["takes_turns_with"]
        lines.append(
            f"  {agent['name']} ({agent['model']}) on {', '.join(agent['devices'])}"
            + (f", taking turns with {', '.join(turns)}" if turns else "")
            + f": peak {agent['peak_gib']:.1f} GiB"
        )
        for item, gib in agent["items_gib"].items():
            lines.append(f"      {item:<20} {gib:8.2f} GiB")
        on, off = agent["activations_gib"]["checkpointing_on"], agent["activations_gib"]["checkpointing_off"]
        lines.append(f"      {'(activations)':<20} {on:8.2f} GiB with checkpointing, {off:.2f} GiB without")
        if agent["vllm_needed_gib"]:
            lines.append(
                f"      {'(vLLM needs)':<20} {agent['vllm_needed_gib']:8.2f} GiB of its reserved share"
            )
    for device, gib in data["devices"].items():
        lines.append(f"  GPU {device}: {gib:.1f} GiB")
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
