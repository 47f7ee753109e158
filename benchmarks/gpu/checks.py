"""The checks behind benchmarks/gpu/validate.py; each returns a JSON-able dict with an ``ok`` verdict.

- :func:`sync_order`: a real cohort (one agent, ``rollout.engine: vllm``, sleep mode on where vLLM allows it)
  through real ``Cohort.step`` calls, with the real engine class subclassed only to record sleep / wake / sync
  and to refuse a sync into a sleeping engine; then the engine's logprobs against the trainer's right after a
  sync (parity), and the rollout / update throughput of those steps.
- :func:`drift`: one family in bf16 (or the given dtype): vLLM samples, the trainer re-scores; mean and p99
  |Δ logprob| in nats/token and the importance-ratio statistics under the family's default cap.
- :func:`torchrun_zero3`: ``corl-vl train`` under torchrun, one agent per process, ZeRO-3, 3 steps, then
  ``--resume`` for one more.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
SYNCED = ["wake:weights", "sync", "wake:kv_cache"]  # Agent.prepare_engine after an update
EXPECTED_CALLS = ["wake", "generate", "sleep", *SYNCED, "generate", "sleep"]


def _recording_vllm() -> type:
    from corl_vl.rollout.vllm_engine import VLLMEngine

    class RecordingVLLM(VLLMEngine):
        """The real engine; records calls and the violations of the order (never raises mid-step)."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.calls: list[str] = []
            self.violations: list[str] = []
            self.asleep: set[str] = set()  # the memory tags asleep

        def generate(self, problems: Any, **kwargs: Any) -> Any:
            if self.asleep:
                self.violations.append("generate while asleep")
            self.calls.append("generate")
            return super().generate(problems, **kwargs)

        def sync_weights(self, model: Any) -> None:
            if "weights" in self.asleep:
                self.violations.append("sync while asleep")
            elif self.sleep_between_phases and "kv_cache" not in self.asleep:
                self.violations.append("sync with the KV cache awake")
            self.calls.append("sync")
            super().sync_weights(model)

        def sleep(self) -> None:
            super().sleep()
            self.calls.append("sleep")
            self.asleep = {"weights", "kv_cache"}

        def wake(self, tags: Any = None) -> None:
            super().wake(tags)
            self.calls.append("wake" if tags is None else "wake:" + ",".join(tags))
            self.asleep = set() if tags is None else self.asleep - set(tags)

    return RecordingVLLM


def _problems(adapter: Any, n: int, seed: int) -> list[Any]:
    from corl_vl.data.synth import generate_problems, to_text_problem

    base = generate_problems(n, seed=seed)
    return base if adapter.supports_images else [to_text_problem(p) for p in base]


def _device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def sync_order(
    model: str, *, dtype: str = "float32", steps: int = 3, max_new_tokens: int = 16
) -> dict[str, Any]:
    """Sleep/wake/sync order through real cohort steps, parity after a sync, rollout/update tokens per second."""
    import torch

    from corl_vl.config import config_from_dict
    from corl_vl.recipe import build_cohort
    from corl_vl.train.agent_rollout import vllm_sizing
    from model_adapters.registry import create_adapter

    cfg = config_from_dict(
        {
            "agents": [{"name": "solo", "model": model, "adapter_kwargs": {"dtype": dtype}}],
            "data": {"limit": 4, "problems_per_step": 4},
            "grpo": {"k": 4, "max_new_tokens": max_new_tokens, "micro_batch_size": 8},
            "rollout": {
                "engine": "hf",
                "sleep_between_phases": True,
            },  # the recording vLLM engine goes in below
            "reward": {"name": "rent"},
            "train": {
                "lr": 1e-5,
                "warmup_ratio": 0,
                "scheduler": "constant",
                "max_steps": steps,
            },
        }
    )
    view = _problems(create_adapter(model, dtype=dtype), 4, seed=7)  # no weights load here
    cohort = build_cohort(cfg, device=_device(), problems=view)
    agent = cohort.agents[0]
    # sized as training sizes it (context from the longest prompt, sleep level 2), every sync checksummed
    sizing = {
        **vllm_sizing("solo", agent.adapter, agent.model, view, cfg.rollout, cfg.grpo.max_new_tokens),
        "weight_checksum": True,
    }
    engine = _recording_vllm()(agent.adapter, gpu_memory_utilization=0.3, sleep_between_phases=True, **sizing)
    agent.engine = engine
    try:
        history = [cohort.step() for _ in range(steps)]
        calls = list(engine.calls)
        prompts, rollouts = agent.rollout([p.id for p in view], seed=123)  # wakes, syncs the last update
        rows = [p for p, r in zip(prompts, rollouts) for _ in r.completions]
        comps = [c for r in rollouts for c in r.completions]
        scored = agent.score(rows, [c.ids for c in comps])
        gaps = [
            abs(float(scored.logprobs[i, t]) - lp)
            for i, c in enumerate(comps)
            for t, lp in enumerate(c.logprobs)
            if lp == lp  # skip NaN (counted by the trainer, not a parity gap)
        ]
        engine_sleeps, violations = engine.sleep_between_phases, list(engine.violations)
    finally:
        engine.close()
        del engine
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    expected = EXPECTED_CALLS + [*SYNCED, "generate", "sleep"] * (steps - 2)
    last = history[-1]["solo"]  # the first step carries warm-up costs
    tokens = last["length/mean"] * len(comps)  # completions per step: problems_per_step × k
    parity = max(gaps, default=0.0)
    tolerance = 1e-3 if dtype == "float32" else 0.1
    return {
        "model": model,
        "dtype": dtype,
        "engine_really_sleeps": engine_sleeps,
        "sleep_level": sizing["sleep_level"],
        "max_model_len": sizing["max_model_len"],
        "checksummed_syncs": calls.count("sync") + 1,  # a mismatch would have raised: each one agreed
        "calls": calls,
        "order_ok": calls == expected and not violations,
        "violations": violations,
        "parity_max_abs_nats": parity,
        "parity_tolerance": tolerance,
        "rollout_tokens_per_s": tokens / max(last["time/rollout"], 1e-9),
        "update_tokens_per_s": tokens / max(last["time/update"], 1e-9),
        "sync_s": last["time/sync"],
        "ok": calls == expected and not violations and parity <= tolerance,
    }


def drift(
    model: str, *, dtype: str = "bfloat16", problems: int = 8, k: int = 4, max_new_tokens: int = 64
) -> dict:
    """Rollout-vs-trainer logprob drift of one family at ``dtype`` (T = 1, processed logprobs both sides)."""
    import torch

    from corl_vl.rollout.vllm_engine import VLLMEngine
    from model_adapters.registry import create_adapter

    adapter = create_adapter(model, dtype=dtype)
    trainer = adapter.load_model(device=_device()).eval()
    engine = VLLMEngine(adapter, max_model_len=4096, gpu_memory_utilization=0.35, sleep_between_phases=False)
    try:
        view = _problems(adapter, problems, seed=11)
        prompts = [adapter.encode_prompt(p) for p in view]
        t0 = time.perf_counter()
        rollouts = engine.generate(
            view, k=k, temperature=1.0, max_new_tokens=max_new_tokens, seed=3, prompts=prompts
        )
        gen_s = time.perf_counter() - t0
    finally:
        engine.close()
        del engine
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    rows = [p for p, r in zip(prompts, rollouts) for _ in r.completions]
    comps = [c for r in rollouts for c in r.completions]
    with torch.no_grad():
        scored = adapter.completion_logprobs(trainer, rows, [c.ids for c in comps], micro_batch_size=8)
    stats = logprob_gaps(adapter, comps, scored)
    return {
        "model": model,
        "dtype": dtype,
        **stats,
        "rollout_tokens_per_s": stats["tokens"] / max(gen_s, 1e-9),
        "ok": stats["gaps"] > 0,
    }


def logprob_gaps(adapter: Any, comps: list[Any], scored: Any) -> dict[str, Any]:
    """Rollout logprobs (``comps``) against the trainer's (``scored``): |Δ| per token in nats, and the
    importance-ratio statistics under the family's default cap."""
    import torch

    from corl_vl.train.grpo import importance_weights

    width = scored.logprobs.shape[1]
    rollout_lp = torch.full((len(comps), width), float("nan"))
    for i, c in enumerate(comps):
        rollout_lp[i, : len(c.logprobs)] = torch.tensor(c.logprobs)
    trainer_lp, mask = scored.logprobs.float().cpu(), scored.mask.cpu().bool()
    used = mask & torch.isfinite(rollout_lp)
    diff = (trainer_lp - rollout_lp)[used].abs()
    weights = importance_weights(trainer_lp, rollout_lp, mask.float(), cap=adapter.importance_ratio_cap)
    return {
        "tokens": int(mask.sum()),
        "gaps": int(diff.numel()),
        "mean_nats": float(diff.mean()) if diff.numel() else float("nan"),
        "p99_nats": float(torch.quantile(diff.double(), 0.99)) if diff.numel() else float("nan"),
        "nonfinite_tokens": int((mask & ~torch.isfinite(rollout_lp)).sum()),
        "is_cap": adapter.importance_ratio_cap,
        **{key.replace("/", "_"): value for key, value in weights.metrics.items()},
    }


def torchrun_zero3(
    models: list[str], *, backend: str, steps: int = 3, timeout: float = 420
) -> dict[str, Any]:
    """``corl-vl train`` under torchrun (one agent per process, ZeRO-3, ``backend``), then ``--resume``."""
    import yaml

    from corl_vl.train.reporting import read_metrics

    with tempfile.TemporaryDirectory(prefix="validate-zero3-") as tmp:
        cfg = {
            "agents": [{"name": f"agent{i}", "model": m} for i, m in enumerate(models)],
            "data": {"limit": 8, "problems_per_step": 2},
            "grpo": {"k": 4, "max_new_tokens": 16, "micro_batch_size": 4},
            "train": {
                "lr": 1e-5,
                "warmup_ratio": 0,
                "plot": False,
                "output_dir": f"{tmp}/run",
                "reward": "rent",
            },
            "distributed": {
                "deepspeed": str(ROOT / "configs" / "deepspeed" / "zero3.json"),
                "backend": backend,
            },
        }
        config = Path(tmp) / "cohort.yaml"
        config.write_text(yaml.safe_dump(cfg))
        base = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            f"--nproc_per_node={len(models)}",
            "--nnodes=1",
            f"--master_port={_free_port()}",
            "-m",
            "corl_vl",
            "train",
            "--config",
            str(config),
            "--no-progress",
        ]
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        seconds = []
        # the resume extends the run by one step: an accepted change of train.max_steps
        resume = ["--max-steps", str(steps + 1), "--resume", "--allow-config-change", "train.max_steps"]
        for extra in (["--max-steps", str(steps)], resume):
            t0 = time.perf_counter()
            proc = subprocess.run(base + extra, env=env, capture_output=True, text=True, timeout=timeout)
            seconds.append(time.perf_counter() - t0)
            if proc.returncode != 0:
                said = [line for line in proc.stderr.splitlines() if "error:" in line]  # the CLI's own line
                error = said[0] if said else (proc.stderr or proc.stdout)[-2000:]
                return {"models": models, "backend": backend, "ok": False, "error": error}
        records = read_metrics(f"{tmp}/run")
    steps_seen = {name: [r["step"] for r in rows] for name, rows in records.items()}
    ok = all(s == list(range(steps + 1)) for s in steps_seen.values()) and len(steps_seen) == len(models)
    return {"models": models, "backend": backend, "steps_logged": steps_seen, "seconds": seconds, "ok": ok}


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
