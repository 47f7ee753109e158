"""GPU validation in one command: from a lent GPU to a verdict in ≤ 10 minutes of run time.

    python benchmarks/gpu/validate.py                   # everything this machine can run
    python benchmarks/gpu/validate.py --sections sync,drift --families tiny-qwen2.5-vl

In order (see :mod:`checks` for what each measures):
1. ``sync``: the tiny cohort with ``rollout.engine: vllm`` and sleep mode on — sleep/wake/sync order through real
   cohort steps, logprob parity right after a sync, and rollout / update tokens per second;
2. ``drift``: for each family whose weights are on this machine (Qwen2.5-VL-3B, InternVL3.5-2B, Gemma-3-4B, a
   Qwen2.5 text model), bf16 rollout-vs-trainer logprob drift (mean and p99 nats/token, ``is/ratio`` stats);
3. ``torchrun``: 2 agents × 1 GPU each under torchrun with ZeRO-3 and NCCL for 3 steps, then ``--resume``.

Prints one table and writes ``benchmarks/gpu/results/<date>.json`` (``<date>-cpu.json`` without a GPU). Without
a GPU it runs its CPU subset — the same code on tiny models, vLLM's CPU backend, no real sleep — and lists what
it skipped and why. Each check runs in its own subprocess (a crash or a leaked engine cannot spoil the next).
"""

from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
REAL_FAMILIES = ("qwen2.5-vl-3b", "internvl3.5-2b", "gemma-3-4b", "qwen2.5-3b")
TINY_FAMILIES = ("tiny-qwen2.5-vl", "tiny-internvl3.5", "tiny-gemma3", "tiny-llama3")
SECTIONS = ("sync", "drift", "torchrun")


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


def plan(args: argparse.Namespace, gpus: int) -> tuple[list[tuple[str, str, dict]], list[dict[str, str]]]:
    """(section, label, payload) to run, and the skipped items with their reasons."""
    todo, skipped = [], []
    sections = args.sections.split(",")
    if "sync" in sections:
        todo.append(("sync", args.cohort_model, {"model": args.cohort_model, "dtype": args.cohort_dtype}))
    if "drift" in sections:
        families = args.families.split(",") if args.families else (REAL_FAMILIES if gpus else TINY_FAMILIES)
        dtype = args.dtype or ("bfloat16" if gpus else "float32")
        for family in families:
            if family.startswith("tiny-") or weights_present(family):
                todo.append(("drift", family, {"model": family, "dtype": dtype}))
            else:
                skipped.append({"check": f"drift {family}", "reason": "weights not in the local HF cache"})
        if not gpus and not args.families:
            skipped += [
                {"check": f"drift {f}", "reason": "no GPU (bf16 drift of real weights)"}
                for f in REAL_FAMILIES
            ]
    if "torchrun" in sections:
        if gpus >= 2 or args.torchrun_backend == "gloo":
            models = args.torchrun_models.split(",")
            todo.append(("torchrun", "+".join(models), {"models": models, "backend": args.torchrun_backend}))
        else:
            why = f"{gpus} GPU(s): needs 2 (one agent per GPU, NCCL); tests/test_distributed.py covers ZeRO on gloo"
            skipped.append({"check": "torchrun ZeRO-3 + resume", "reason": why})
    if not gpus:
        skipped.append({"check": "vLLM sleep mode", "reason": "vLLM refuses sleep on CPU: the order is checked, "
                        "the memory release is not"})  # fmt: skip
    return todo, skipped


def table(results: list[dict[str, Any]], skipped: list[dict[str, str]]) -> str:
    lines = [f"{'check':<34} {'ok':<4} details"]
    for r in results:
        if r["check"] == "sync":
            d = (f"parity {r.get('parity_max_abs_nats', float('nan')):.2e} nats; rollout "
                 f"{r.get('rollout_tokens_per_s', 0):.0f} tok/s, update {r.get('update_tokens_per_s', 0):.0f} tok/s")  # fmt: skip
        elif r["check"] == "drift":
            d = (f"mean {r.get('mean_nats', float('nan')):.2e} p99 {r.get('p99_nats', float('nan')):.2e} nats/tok, "
                 f"ratio max {r.get('is_ratio_max', float('nan')):.3f}, truncated {r.get('is_truncated_frac', 0):.4f}")  # fmt: skip
        else:
            d = f"steps {r.get('steps_logged')}, {r.get('seconds')} s"
        if "error" in r:
            d = "ERROR " + r["error"].strip().splitlines()[-1][:120]
        lines.append(f"{r['check'] + ' ' + r['label']:<34.34} {'yes' if r.get('ok') else 'NO':<4} {d}")
    lines += [f"{'skipped: ' + s['check']:<39} {s['reason']}" for s in skipped]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sections", default=",".join(SECTIONS), help=f"comma list of {', '.join(SECTIONS)}")
    parser.add_argument("--cohort-model", default="tiny-qwen2.5-vl", help="the sync check's model")
    parser.add_argument(
        "--cohort-dtype", default="float32", help="the sync check's dtype (parity: 1e-3 in fp32)"
    )
    parser.add_argument("--families", help="drift: comma list of presets (default: real on GPU, tiny on CPU)")
    parser.add_argument("--dtype", help="drift dtype (default bfloat16 on GPU, float32 on CPU)")
    parser.add_argument("--torchrun-models", default="tiny-qwen2.5-vl,tiny-internvl3.5")
    parser.add_argument("--torchrun-backend", default="nccl", help="nccl (2 GPUs) or gloo (CPU, for testing)")
    parser.add_argument(
        "--budget-s",
        type=float,
        help="stop starting checks after this many seconds (default 600 on GPU, 1800 on CPU)",
    )
    parser.add_argument("--out", help="result file (default benchmarks/gpu/results/<date>[-cpu].json)")
    parser.add_argument("--run-one", help=argparse.SUPPRESS)
    parser.add_argument("--payload", help=argparse.SUPPRESS)
    parser.add_argument("--emit", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.run_one:  # child process: one check
        import checks

        fn = {"sync": checks.sync_order, "drift": checks.drift, "torchrun": checks.torchrun_zero3}[
            args.run_one
        ]
        payload = json.loads(args.payload)
        Path(args.emit).write_text(json.dumps(fn(**payload)))
        return 0

    import torch

    from corl_vl.paths import configure_cache_env

    configure_cache_env()
    gpus = torch.cuda.device_count()
    todo, skipped = plan(args, gpus)
    budget = args.budget_s or (600.0 if gpus else 1800.0)
    started, results = time.perf_counter(), []
    for check, label, payload in todo:
        left = budget - (time.perf_counter() - started)
        if left <= 30:
            skipped.append({"check": f"{check} {label}", "reason": f"time budget of {budget:.0f} s spent"})
            continue
        results.append({"check": check, "label": label, **run_isolated(check, payload, timeout=left)})
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    out = Path(args.out) if args.out else HERE / "results" / f"{date}{'' if gpus else '-cpu'}.json"
    device = torch.cuda.get_device_name(0) if gpus else "cpu"
    report = {"date": date, "device": device, "gpus": gpus, "results": results, "skipped": skipped,
              "seconds": round(time.perf_counter() - started, 1), "ok": all(r.get("ok") for r in results)}  # fmt: skip
    out.parent.mkdir(parents=True, exist_ok=True)
    from corl_vl.io import write_text_atomic

    write_text_atomic(out, json.dumps(report, indent=2) + "\n")
    print(table(results, skipped))
    print(f"verdict: {'PASS' if report['ok'] else 'FAIL'} ({report['seconds']} s) -> {out}")
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
