"""The ``pair_turns`` check: the 1-GPU pair as ``corl-vl train`` runs it now, two processes taking turns on one GPU.

:func:`pair_turns` writes the pair's config (HF engine, RENT reward: every completion trains) and launches it the
way ``corl-vl train`` starts itself on a node with one GPU (``corl_vl.cli.launch.self_launch_command``: torch's
launcher, ``--standalone``, one process per agent, ``CORL_VL_NODE_GPUS=1``), each process running the real CLI
function inside :mod:`turns_worker`'s probes. Each agent runs in its own world (NCCL on a GPU, gloo on the CPU);
what crosses agents goes through the JSON control plane; the two processes hand a baton back and forth.

:func:`judge_turns` reads the records: the turns strictly one at a time, in the fixed order (build, then per step
rollout and update, rank 0 before rank 1); each idle agent's state offloaded after its build and around each
update; the control plane carried only plain JSON values, the same exchanges on
both processes; every tensor of a collective was on the agent world's own device type; both agents logged every
step with an update. On CUDA each process's peak memory (allocated, reserved), the GPU's peak while a turn ran
(both processes), and ``corl-vl plan``'s figures for the same config (:func:`plan_summary`) sit side by side;
they are reported, not judged (the plan is a prediction this check exists to test).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from checks_dist import run_session

ROOT = Path(__file__).resolve().parents[2]
WORKER = Path(__file__).resolve().parent / "turns_worker.py"
GIB = 2**30


def pair_config(
    models: list[str], out: Path, *, dtype: str, problems: int, k: int, max_new_tokens: int, steps: int
) -> dict[str, Any]:
    """The check's cohort: forced-length completions (the memory of the full length), no plots, no sinks."""
    return {
        "agents": [
            {"name": f"agent{i}", "model": m, "adapter_kwargs": {"dtype": dtype}}
            for i, m in enumerate(models)
        ],
        "data": {"limit": problems, "problems_per_step": problems},
        "grpo": {
            "k": k,
            "max_new_tokens": max_new_tokens,
            "min_new_tokens": max_new_tokens,
            "micro_batch_size": k,
        },
        "rollout": {"engine": "hf", "batch_size": problems},
        "reward": {"name": "rent"},
        "train": {
            "lr": 1e-6,
            "warmup_ratio": 0,
            "scheduler": "constant",
            "max_steps": steps,
            "plot": False,
            "report_to": ["none"],
            "output_dir": str(out / "run"),
        },
    }


def launch_command(config: Path, out: Path) -> list[str]:
    """``corl-vl train``'s own launch for 2 agents on 1 GPU, with the worker in place of ``-m corl_vl``."""
    sys.path.insert(0, str(ROOT))
    from corl_vl.cli.launch import self_launch_command

    argv = ["train", "--config", str(config), "--no-progress"]
    cmd = self_launch_command(2, argv, sys.executable)
    at = cmd.index("corl_vl") - 1  # "-m", "corl_vl"
    return [*cmd[:at], str(WORKER), str(out), "--no-checkpoint", "--", *cmd[at + 2 :]]


def pair_turns(
    models: list[str],
    *,
    dtype: str = "bfloat16",
    problems: int = 2,
    k: int = 2,
    max_new_tokens: int = 64,
    steps: int = 2,
    timeout: float = 420,
) -> dict[str, Any]:
    """``steps`` steps of the pair ``models`` as two processes sharing one GPU (module docstring)."""
    import torch
    import yaml

    sys.path.insert(0, str(ROOT))
    from corl_vl.cli.launch import self_launch_processes
    from corl_vl.config import config_from_dict
    from corl_vl.train.reporting import read_metrics

    cuda = torch.cuda.is_available()
    with tempfile.TemporaryDirectory(prefix="validate-turns-") as tmp:
        out = Path(tmp)
        raw = pair_config(
            models, out, dtype=dtype, problems=problems, k=k, max_new_tokens=max_new_tokens, steps=steps
        )
        cfg = config_from_dict(raw, "pair_turns")
        nproc = self_launch_processes(cfg, 1, {})  # what `corl-vl train` starts on a node with one GPU
        (out / "cohort.yaml").write_text(yaml.safe_dump(raw))
        error = _launch(launch_command(out / "cohort.yaml", out), out, timeout)
        if error:
            return {"models": models, "dtype": dtype, "ok": False, "error": error}
        ranks = [json.loads((out / f"rank-{r}.json").read_text()) for r in range(2)]
        entries = (out / "turns.log").read_text().splitlines()
        metrics = read_metrics(out / "run")
        gpu_memory = torch.cuda.get_device_properties(0).total_memory if cuda else None
    verdict = judge_turns(ranks, entries, metrics, steps, backend="nccl" if cuda else "gloo")
    plan = plan_summary(cfg, gpu_memory) if gpu_memory else {"error": "no GPU visible"}
    return {
        "models": models,
        "dtype": dtype,
        "self_launch_processes": nproc,
        **verdict,
        "memory": memory_summary(ranks) if cuda else None,
        "plan": plan,
        "ok": verdict["ok"] and nproc == 2,
    }


def _launch(cmd: list[str], out: Path, timeout: float) -> str | None:
    """Run the launch in its own session; None when it succeeded, else the end of its output."""
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "CORL_VL_NODE_GPUS": "1", "PYTHONPATH": path}
    env.setdefault("OMP_NUM_THREADS", "1")
    code, stdout, stderr = run_session(cmd, env, timeout, cwd=out)
    if code is None:
        return f"timed out after {timeout:.0f} s"
    if code == 0:
        return None
    said = [line for line in stderr.splitlines() if "error:" in line]  # the CLI's own line
    return said[0] if said else (stderr or stdout)[-2000:]


def expected_turns(steps: int) -> list[tuple[int, str]]:
    """(cohort rank, label) of every turn on the shared GPU, in order."""
    want = [(r, "build") for r in (0, 1)]
    for step in range(steps):
        want += [(r, f"{phase} {step}") for phase in ("rollout", "update") for r in (0, 1)]
    return want


def judge_turns(
    ranks: list[dict[str, Any]],
    entries: list[str],
    metrics: dict[str, list[dict[str, Any]]],
    steps: int,
    *,
    backend: str,
) -> dict[str, Any]:
    """The verdict from both processes' records, the turns log (``enter|exit RANK LABEL`` lines) and the run's
    metrics (module docstring)."""
    inside, overlap, entered = None, False, []
    for line in entries:
        what, rank, label = line.split(" ", 2)
        if what == "enter":
            overlap |= inside is not None
            inside = rank
            entered.append((int(rank), label))
        else:
            overlap |= inside != rank
            inside = None
    in_order = not overlap and entered == expected_turns(steps)
    planes = [r["control_plane"] for r in ranks]
    json_only = all(not p["not_plain"] for p in planes) and planes[0]["order"] == planes[1]["order"]
    worlds = [r["agent_world"] for r in ranks]
    device = "cuda" if backend == "nccl" else "cpu"
    tensors_at_home = all(
        key.endswith(f":{device}") for w in worlds for key in w.get("tensor_collectives", {})
    )
    own_worlds = all(w["backend"] == backend and w["size"] == 1 for w in worlds)
    agents = sorted(r.get("agent", "?") for r in ranks)
    shared = all(r.get("takes_turns") and r.get("shares_gpu_with") == [0, 1] for r in ranks)
    logged = {name: [row["step"] for row in rows] for name, rows in metrics.items()}
    trained = sorted(logged) == agents and all(
        row.get("update/skipped") == 0.0 for rows in metrics.values() for row in rows
    )
    steps_ok = all(s == list(range(steps)) for s in logged.values())
    exited = all(r.get("exit_code") == 0 for r in ranks)
    # the idle agent's state waits in host memory: out after its build, back and out again around each update
    offloads = {r.get("agent", "?"): r.get("offload", {}) for r in ranks}
    offload_ok = all(o.get("offloads") == steps + 1 and o.get("reloads") == steps for o in offloads.values())
    verdicts = (
        in_order,
        json_only,
        tensors_at_home,
        own_worlds,
        shared,
        trained,
        steps_ok,
        exited,
        offload_ok,
    )
    return {
        "agents": agents,
        "backend": sorted({str(w["backend"]) for w in worlds}),
        "turns": [f"{rank}:{label}" for rank, label in entered],
        "turns_in_order": in_order,
        "control_plane_exchanges": planes[0]["exchanges"],
        "control_plane_purposes": planes[0]["purposes"],
        "control_plane_bytes": [p["bytes"] for p in planes],
        "control_plane_json_only": json_only,
        "tensor_collectives": [w.get("tensor_collectives", {}) for w in worlds],
        "tensors_on_agent_device": tensors_at_home,
        "agent_worlds_ok": own_worlds,
        "steps_logged": logged,
        "checkpoints_skipped": [r.get("checkpoints_skipped") for r in ranks],
        "offloaded_gib": {name: round(o.get("moved_gib", 0.0), 2) for name, o in offloads.items()},
        "offload_ok": offload_ok,
        "seconds": [round(r.get("seconds", 0.0), 1) for r in ranks],
        "ok": all(verdicts),
    }


def memory_summary(ranks: list[dict[str, Any]]) -> dict[str, Any]:
    """Each agent's peak (allocated, reserved) and the GPU's peak during the turns: the used memory at a turn's
    end (both processes, their CUDA contexts) plus what the active one released from its peak by then."""
    device_peak = max(
        (
            t["device_used_gib"] + t["peak_reserved_gib"] - t["end_reserved_gib"]
            for r in ranks
            for t in r["turns"]
        ),
        default=None,
    )
    return {
        "per_agent": {
            r["agent"]: {
                "peak_allocated_gib": round(r["peak_allocated_gib"], 2),
                "peak_reserved_gib": round(r["peak_reserved_gib"], 2),
                "turns": {
                    t["label"]: round(t["peak_allocated_gib"], 2)
                    for t in r["turns"]
                    if "peak_allocated_gib" in t
                },
            }
            for r in ranks
        },
        "device_peak_gib": round(device_peak, 2) if device_peak is not None else None,
        "device": ranks[0].get("device_name"),
    }


def plan_summary(cfg: Any, gpu_memory: int) -> dict[str, Any]:
    """``corl-vl plan``'s figures for ``cfg`` on one GPU of ``gpu_memory`` bytes: the device's peak, each agent's,
    and the layout / dtype where the plan states them (its fields are read with care: the plan evolves)."""
    from corl_vl.errors import CorlError
    from corl_vl.plan import plan_for_config

    try:
        plan = plan_for_config(cfg, 1, int(gpu_memory))
    except CorlError as err:
        return {"error": str(err)}
    raw = plan.to_dict() if hasattr(plan, "to_dict") else {}
    peaks = getattr(plan, "device_peak", None) or {}
    agents = raw.get("agents") or []
    return {
        "fits": bool(getattr(plan, "fits", raw.get("fits"))),
        "device_peak_gib": round(max(peaks.values()) / GIB, 2) if peaks else None,
        "per_agent_gib": {a.get("name"): a.get("peak_gib") for a in agents},
        "layout": getattr(plan, "layout", None) or raw.get("layout"),
        "dtype": getattr(plan, "dtype", None) or raw.get("dtype") or _dtypes(cfg),
        "notes": list(raw.get("notes") or getattr(plan, "notes", []) or []),
    }


def _dtypes(cfg: Any) -> list[str]:
    return [str(a.adapter_kwargs.get("dtype", "auto")) for a in cfg.agents]
