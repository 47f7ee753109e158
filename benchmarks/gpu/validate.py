"""GPU validation in one command, for an offline GPU node with a fixed image: ≤ 8 minutes on one H200.

    python benchmarks/gpu/validate.py --bundle wheels/              # here (pip, PyPI): the wheels to carry along
    python benchmarks/gpu/validate.py --dry-run --env h200-image    # what would run there, skips, estimated time
    python benchmarks/gpu/validate.py --out DIR                     # there: everything this machine can run
    python benchmarks/gpu/validate.py --sections hf_drift,sync --budget-s 300

Sections (:mod:`sections`), in order: those that need only torch + transformers (+ peft) first —
``pair_memory``, ``pair_turns``, ``logprob_tail``, ``lora``, ``throughput``, ``hf_drift`` — then ``sync`` and
``drift`` (vLLM), ``torchrun`` (DeepSpeed, 2 GPUs), ``uneven_placement`` (DeepSpeed, 3 GPUs) and
``tp_rollout`` (vLLM + DeepSpeed, 2 GPUs). A section whose packages, GPUs or code (issue #23's
full-size presets, the process model, LoRA) are absent is skipped by name with the reason; it runs unchanged where they
are present. Without a GPU the sections that can run on CPU run their tiny subset. Each check runs in its own
subprocess (a crash or a leaked engine cannot spoil the next). Writes one JSON and one Markdown table into
``--out`` (default ``benchmarks/gpu/results``) and prints the table.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from sections import (  # noqa: E402
    BY_NAME,
    ENVIRONMENTS,
    FAMILIES,
    TINY_FAMILIES,
    Environment,
    Plan,
    as_dict,
    code_here,
    describe,
    load_environment,
    make_plan,
    payload_models,
)

REAL_FAMILIES = FAMILIES  # vLLM drift: real weights, when they are in the local HF cache
Job = tuple[str, str, dict[str, Any]]


def weights_present(preset: str) -> bool:
    """Whether a preset's weights are on this machine (HF cache), without touching the network."""
    from huggingface_hub import try_to_load_from_cache

    from model_adapters.presets import get_preset

    hub_id = get_preset(preset).hub_id
    return hub_id is not None and isinstance(try_to_load_from_cache(hub_id, "config.json"), str)


def run_isolated(check: str, payload: dict[str, Any], timeout: float) -> dict[str, Any]:
    """One check in a fresh interpreter; its result (or its error) as a dict."""
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        out = Path(f.name)
    cmd = [
        sys.executable,
        str(Path(__file__)),
        "--run-one",
        check,
        "--payload",
        json.dumps(payload),
        "--emit",
        str(out),
    ]
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {**payload, "ok": False, "error": f"timed out after {timeout:.0f} s"}
    result = json.loads(out.read_text()) if proc.returncode == 0 and out.stat().st_size else None
    out.unlink(missing_ok=True)
    if result is None:
        return {**payload, "ok": False, "error": (proc.stderr or proc.stdout)[-1500:]}
    return {**result, "seconds": round(time.perf_counter() - t0, 1)}


def jobs(section: str, args: argparse.Namespace, on_gpu: bool) -> tuple[list[Job], list[dict[str, str]]]:
    """The (check, label, payload) runs of one section, and its per-model skips."""
    if section in ("pair_memory", "throughput", "hf_drift"):
        size = (
            {"dtype": "bfloat16", "problems": 4, "k": 4, "max_new_tokens": 256, "steps": 2}
            if on_gpu
            else {"dtype": "float32", "problems": 2, "k": 2, "max_new_tokens": 8, "steps": 2}
        )
        return [("hf_agent", m, {"model": m, **size}) for m in payload_models(section, on_gpu)], []
    if section == "pair_turns":
        size = (
            {"dtype": "bfloat16", "problems": 2, "k": 2, "max_new_tokens": 64, "steps": 2}
            if on_gpu
            else {"dtype": "float32", "problems": 2, "k": 2, "max_new_tokens": 4, "steps": 2}
        )
        size["timeout"] = 300  # the launch's own limit (run() keeps it under the budget left)
        models = list(payload_models(section, on_gpu))
        return [("pair_turns", " + ".join(models) + ", 2 processes on 1 GPU", {"models": models, **size})], []
    if section == "logprob_tail":
        size = (
            {} if on_gpu else {"batch": 2, "tokens": 32, "vocab": 32_000, "hidden": 256, "dtype": "float32"}
        )
        label = "8×1024, V=151936" if on_gpu else "2×32, V=32000"
        return [("logprob_tail", label, size)], []
    if section == "lora":
        size = {} if on_gpu else {"dtype": "float32", "k": 2, "max_new_tokens": 8}
        return [("lora", m, {"model": m, **size}) for m in payload_models(section, on_gpu)], []
    if section == "sync":
        return [("sync", args.cohort_model, {"model": args.cohort_model, "dtype": args.cohort_dtype})], []
    if section == "drift":
        families = args.families.split(",") if args.families else (REAL_FAMILIES if on_gpu else TINY_FAMILIES)
        dtype = args.dtype or ("bfloat16" if on_gpu else "float32")
        todo, skipped = [], []
        for family in families:
            if family.startswith("tiny-") or weights_present(family):
                todo.append(("drift", family, {"model": family, "dtype": dtype}))
            else:
                skipped.append(
                    {"section": "drift", "label": family, "reason": "weights not in the local HF cache"}
                )
        return todo, skipped
    if section == "uneven_placement":
        return [("uneven_placement", "qwen 2 GPUs + llama 1", {})], []
    if section == "tp_rollout":
        return [("tp_rollout", "1 agent, TP=2", {"engine": "vllm"})], []
    models = args.torchrun_models.split(",")
    return [("torchrun", "+".join(models), {"models": models, "backend": "nccl"})], []


def details(section: str, r: dict[str, Any]) -> str:
    """One table cell for a result."""
    if "error" in r:
        return "ERROR " + (r["error"].strip().splitlines() or ["?"])[-1][:120]
    if section == "pair_memory":
        peak = "n/a on CPU" if r.get("peak_memory_gib") is None else f"{r['peak_memory_gib']:.1f} GiB"
        plan = r.get("plan", {})
        return f"peak {peak}; plan: {plan.get('error') or json.dumps(plan)[:80]}"
    if section == "pair_turns":
        return turns_cell(r)
    if section == "logprob_tail":
        peak = r.get("peak_above_model_gib")
        return (
            f"peak above the model {'n/a on CPU' if peak is None else f'{peak:.2f} GiB'}, {r['tail_s']:.2f} s"
        )
    if section == "lora":
        cells = []
        for name, v in r["variants"].items():
            peak = "n/a on CPU" if v["peak_memory_gib"] is None else f"{v['peak_memory_gib']:.1f} GiB"
            planned = (v["plan"].get("agents") or [{}])[0].get("peak_gib", v["plan"].get("error", "?"))
            cells.append(
                f"{name}: {v['trained_parameters'] / 1e6:.1f} M trained, peak {peak} (plan {planned})"
            )
        return "; ".join(cells)
    if section == "throughput":
        return f"rollout {r['rollout_tokens_per_s']:.0f} tok/s, update {r['update_tokens_per_s']:.0f} tok/s"
    if section in ("hf_drift", "drift"):
        d = r.get("drift", r)
        return (
            f"mean {d['mean_nats']:.2e} p99 {d['p99_nats']:.2e} nats/tok, ratio max {d['is_ratio_max']:.3f}, "
            f"truncated {d.get('is_truncated_frac', 0):.4f}"
        )
    if section == "sync":
        return (
            f"parity {r['parity_max_abs_nats']:.2e} nats, {r.get('checksummed_syncs', 0)} syncs checksummed "
            f"(sleep level {r.get('sleep_level')}, max_model_len {r.get('max_model_len')}); rollout {r['rollout_tokens_per_s']:.0f} tok/s, "
            f"update {r['update_tokens_per_s']:.0f} tok/s"
        )
    if section == "uneven_placement":
        return (
            f"placement {json.dumps(r['placement'])}, reward shares {r['share_sizes']}, "
            f"labels equal on every rank: {r['labels_equal']}, shares split: {r['shares_ok']}"
        )
    if section == "tp_rollout":
        return (
            f"{r['engine_class']}, {r['rollouts']} rollouts, {r['syncs']} sync(s), "
            f"same tokens on both ranks: {r['same_rollouts']}"
        )
    return f"steps {r.get('steps_logged')}"


def turns_cell(r: dict[str, Any]) -> str:
    """``pair_turns``' table cell: the layout's evidence, then memory next to the plan's (GPU only)."""
    cell = (
        f"{r['self_launch_processes']} processes, {'/'.join(r['backend'])} agent worlds, "
        f"{len(r['turns'])} turns in order: {r['turns_in_order']}, {r['control_plane_exchanges']} control-plane "
        f"exchanges, JSON only: {r['control_plane_json_only']}, tensors on the agent's device: "
        f"{r['tensors_on_agent_device']}"
    )
    memory, plan = r.get("memory"), r.get("plan") or {}
    if memory is None:
        return cell + "; peak memory n/a on CPU"
    peaks = {n: a["peak_allocated_gib"] for n, a in memory["per_agent"].items()}
    cell += f", offloaded between turns {json.dumps(r['offloaded_gib'])} GiB"
    planned = plan.get("error") or (
        f"{plan.get('device_peak_gib')} GiB, per agent {json.dumps(plan.get('per_agent_gib'))}"
        + (f", layout {plan['layout']}" if plan.get("layout") else "")
    )
    return (
        f"{cell}; peak allocated per agent {json.dumps(peaks)} GiB, GPU ≈ {memory['device_peak_gib']} GiB "
        f"(both processes); plan: {planned}"
    )


def markdown(results: list[dict[str, Any]], skipped: list[dict[str, str]], header: str) -> str:
    lines = [header, "", "| section | model | ok | seconds | details |", "|---|---|---|---|---|"]
    for r in results:
        ok = "yes" if r.get("ok") else "NO"
        lines.append(
            f"| {r['section']} | {r['label']} | {ok} | {r.get('seconds', '')} | {details(r['section'], r)} |"
        )
    lines += [f"| {s['section']} | {s.get('label', '')} | skipped | | {s['reason']} |" for s in skipped]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--bundle", type=Path, help="write the wheels the GPU image lacks into this folder, then stop"
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="print what would run and what is skipped, then stop"
    )
    parser.add_argument(
        "--env",
        default="here",
        help=f"--dry-run's machine: here, {', '.join(ENVIRONMENTS)}, "
        "or a JSON file {gpus, gpu_memory_gib, packages}",
    )
    parser.add_argument("--sections", default=",".join(BY_NAME), help=f"comma list of {', '.join(BY_NAME)}")
    parser.add_argument(
        "--budget-s", type=float, help="seconds for the whole run (default 480 on GPU, 1800 on CPU)"
    )
    parser.add_argument("--out", type=Path, default=HERE / "results", help="folder for the JSON and Markdown")
    parser.add_argument("--cohort-model", default="tiny-qwen2.5-vl", help="the sync section's model")
    parser.add_argument(
        "--cohort-dtype", default="float32", help="the sync section's dtype (parity: 1e-3 in fp32)"
    )
    parser.add_argument(
        "--families", help="drift (vLLM): comma list of presets (default: real on GPU, tiny on CPU)"
    )
    parser.add_argument("--dtype", help="drift (vLLM) dtype (default bfloat16 on GPU, float32 on CPU)")
    parser.add_argument("--torchrun-models", default="tiny-qwen2.5-vl,tiny-internvl3.5")
    parser.add_argument("--run-one", help=argparse.SUPPRESS)
    parser.add_argument("--payload", help=argparse.SUPPRESS)
    parser.add_argument("--emit", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.run_one:  # child process: one check
        import checks
        import checks_dist
        import checks_hf
        import checks_turns

        fn = {
            "sync": checks.sync_order,
            "drift": checks.drift,
            "torchrun": checks.torchrun_zero3,
            "uneven_placement": checks_dist.uneven_placement,
            "tp_rollout": checks_dist.tp_rollout,
            "hf_agent": checks_hf.hf_agent,
            "logprob_tail": checks_hf.logprob_tail,
            "pair_turns": checks_turns.pair_turns,
            "lora": checks_hf.lora,
        }[args.run_one]
        Path(args.emit).write_text(json.dumps(fn(**json.loads(args.payload))))
        # the result is written: skip the interpreter's teardown of torch/vLLM (2-5 s per check on CPU)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    if args.bundle:
        from bundle import build_bundle

        made = build_bundle(args.bundle, HERE.parents[1])
        print(f"{len(made['wheels'])} wheels, {made['bytes'] / 2**20:.1f} MiB in {args.bundle}")
        for name, why in made["left_out"].items():
            print(f"  left out: {name}: {why}")
        return 0

    from corl_vl.paths import configure_cache_env

    configure_cache_env()
    env = load_environment(args.env if args.dry_run else "here")
    budget = args.budget_s or (480.0 if env.gpus else 1800.0)
    plan = make_plan(env, code_here(), [s.strip() for s in args.sections.split(",") if s.strip()], budget)
    if args.dry_run:
        print(describe(plan, env, budget))
        return 0
    return run(plan, env, args, budget)


def run(plan: Plan, env: Environment, args: argparse.Namespace, budget: float) -> int:
    """Run the plan's sections (identical jobs once), write the JSON and the Markdown, print the table."""
    import torch

    started, results, skipped, done = time.perf_counter(), [], list(plan.skipped), {}
    for section in plan.run:
        todo, per_model = jobs(section.name, args, env.gpus > 0)
        skipped += per_model
        for check, label, payload in todo:
            key = json.dumps([check, payload], sort_keys=True)
            left = budget - (time.perf_counter() - started)
            if key not in done and left <= 30:
                skipped.append(
                    {"section": section.name, "label": label, "reason": f"--budget-s {budget:.0f} spent"}
                )
                continue
            if key not in done:
                # a check that launches processes stops them itself, before this limit would orphan them
                capped = (
                    {**payload, "timeout": min(payload["timeout"], left - 15)}
                    if "timeout" in payload
                    else payload
                )
                done[key] = run_isolated(check, capped, timeout=left)
            results.append({"section": section.name, "label": label, **done[key]})
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    stem = date if env.gpus else f"{date}-cpu"
    device = torch.cuda.get_device_name(0) if env.gpus else "cpu"
    seconds = round(time.perf_counter() - started, 1)
    ok = all(r.get("ok") for r in results)
    report = {
        "date": date,
        "device": device,
        "gpus": env.gpus,
        "gpu_memory_gib": env.gpu_memory_gib,
        "packages": sorted(env.packages),
        "budget_s": budget,
        "seconds": seconds,
        "ok": ok,
        "sections": [as_dict(s) for s in plan.run],
        "results": results,
        "skipped": skipped,
    }
    header = f"GPU validation {date} on {device} × {env.gpus}: {'PASS' if ok else 'FAIL'} in {seconds} s"
    table = markdown(results, skipped, header)
    from corl_vl.io import write_text_atomic

    args.out.mkdir(parents=True, exist_ok=True)
    write_text_atomic(args.out / f"{stem}.json", json.dumps(report, indent=1) + "\n")
    write_text_atomic(args.out / f"{stem}.md", table + "\n")
    print(table)
    print(f"-> {args.out / (stem + '.json')}, {args.out / (stem + '.md')}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
