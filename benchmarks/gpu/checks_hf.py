"""Checks that need only torch + transformers: they run on a GPU image without vLLM or DeepSpeed.

- :func:`hf_agent`: one agent with the HF rollout engine through real ``Cohort.step`` calls — peak accelerator
  memory of the steps, rollout and update tokens per second of the last step, then a fresh rollout re-scored
  by the trainer's forward: the drift between HF ``generate``'s own logprobs (KV cache, padded batch) and the
  trainer's at the same weights. One run feeds ``pair_memory``, ``throughput`` and ``hf_drift``.
- :func:`logprob_tail`: peak accelerator memory of the trainer's logprob tail (LM head, log-softmax, gather)
  forward + backward over B × T completion tokens at a real vocabulary, on a one-layer model of the real
  width built from a tiny preset's config (its tokenizer and chat template; random weights, no download).
- :func:`lora`: one agent with LoRA (``agents[i].lora``), then with its vision tower and projector frozen
  (``train.freeze``): trained parameters and peak memory of a step next to the plan's, frozen weights unmoved.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from checks import ROOT, _device, _problems, logprob_gaps


def _solo(
    model: str,
    dtype: str,
    problems: int,
    k: int,
    max_new_tokens: int,
    micro_batch_size: int,
    train: dict[str, Any],
    agent_extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One agent, RENT reward (every completion trains), completions forced to ``max_new_tokens``, HF engine."""
    return {
        "agents": [
            {"name": "solo", "model": model, "adapter_kwargs": {"dtype": dtype}, **(agent_extra or {})}
        ],
        "data": {"limit": problems, "problems_per_step": problems},
        "grpo": {
            "k": k,
            "max_new_tokens": max_new_tokens,
            "min_new_tokens": max_new_tokens,
            "micro_batch_size": micro_batch_size,
        },
        "rollout": {"engine": "hf", "batch_size": problems},
        "reward": {"name": "rent"},
        "train": train,
    }


def hf_agent(
    model: str,
    *,
    dtype: str = "bfloat16",
    problems: int = 4,
    k: int = 4,
    max_new_tokens: int = 256,
    steps: int = 2,
    micro_batch_size: int = 4,
) -> dict[str, Any]:
    """``steps`` training steps of one agent (RENT reward: every completion trains) with forced-length
    completions, then the HF-rollout-vs-trainer drift; peak memory on CUDA only (``None`` on CPU)."""
    import torch

    from corl_vl.config import config_from_dict
    from corl_vl.recipe import build_cohort
    from model_adapters.registry import create_adapter

    cfg = config_from_dict(
        _solo(
            model,
            dtype,
            problems,
            k,
            max_new_tokens,
            micro_batch_size,
            {"lr": 1e-6, "warmup_ratio": 0, "scheduler": "constant", "max_steps": steps},
        )
    )
    device = _device()
    cuda = device == "cuda"
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    view = _problems(create_adapter(model, dtype=dtype), problems, seed=7)  # no weights load here
    cohort = build_cohort(cfg, device=device, problems=view)
    agent = cohort.agents[0]
    history = [cohort.step()["solo"] for _ in range(max(steps, 1))]
    peak = torch.cuda.max_memory_allocated() if cuda else None
    last = history[-1]
    tokens = last["length/mean"] * problems * k
    # drift from a free-length rollout: a forced length masks stop tokens in the sampling distribution, which
    # the trainer's forward does not, and that gap is not drift
    prompts = agent.encode([p.id for p in view])
    with agent.backend.inference_weights():
        rollouts = agent.prepare_engine().generate(
            view, k=k, temperature=1.0, top_p=1.0, max_new_tokens=max_new_tokens, seed=123, prompts=prompts
        )
    rows = [p for p, r in zip(prompts, rollouts) for _ in r.completions]
    comps = [c for r in rollouts for c in r.completions]
    scored = agent.score(rows, [c.ids for c in comps])
    drift = logprob_gaps(agent.adapter, comps, scored)
    return {
        "model": model,
        "dtype": dtype,
        "device": device,
        "peak_memory_gib": peak / 2**30 if peak is not None else None,
        "plan": plan_prediction(cfg),
        "rollout_tokens_per_s": tokens / max(last["time/rollout"], 1e-9),
        "update_tokens_per_s": tokens / max(last["time/update"], 1e-9),
        "update_skipped": [m["update/skipped"] for m in history],
        "drift": drift,
        "ok": all(m["update/skipped"] == 0.0 for m in history) and drift["gaps"] > 0,
    }


def plan_prediction(cfg: Any) -> dict[str, Any]:
    """``corl-vl plan``'s JSON for the check's own config ``cfg`` (same agents, dtype, K, lengths and levers)
    on this machine's GPUs, or why there is none."""
    import yaml

    from corl_vl.config import to_dict

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "config.yaml"
        path.write_text(yaml.safe_dump(to_dict(cfg)))
        cmd = [sys.executable, "-m", "corl_vl", "plan", "--config", str(path), "--json"]
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if proc.returncode not in (0, 1):  # 1: it does not fit, still a plan
        lines = (proc.stderr or proc.stdout).strip().splitlines()
        return {"error": lines[-1] if lines else f"exit code {proc.returncode}"}
    try:
        return json.loads(proc.stdout)
    except ValueError:
        return {"error": "corl-vl plan --json printed no JSON"}


def logprob_tail(
    *,
    batch: int = 8,
    tokens: int = 1024,
    vocab: int = 151_936,
    hidden: int = 2048,
    dtype: str = "bfloat16",
    base: str = "tiny-qwen2.5",
) -> dict[str, Any]:
    """Peak memory above the loaded model of ``completion_logprobs`` forward + backward over ``batch`` ×
    ``tokens`` completion tokens; ``None`` on CPU (a CUDA counter). The body is one layer: the tail's memory
    depends on B × T × V, not on depth."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from corl_vl.data.synth import generate_problems, to_text_problem
    from model_adapters.registry import create_adapter

    adapter = create_adapter(base, dtype=dtype)
    config = AutoConfig.from_pretrained(adapter.model_path)
    heads = max(1, hidden // 128)
    config.update(
        {
            "hidden_size": hidden,
            "num_hidden_layers": 1,
            "intermediate_size": hidden,
            "num_attention_heads": heads,
            "num_key_value_heads": max(1, heads // 8),
            "head_dim": hidden // heads,
            "vocab_size": vocab,
            "layer_types": ["full_attention"],
        }
    )
    device = _device()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(config, dtype=getattr(torch, dtype)).to(device).train()
    prompt = adapter.encode_prompt(to_text_problem(generate_problems(1, seed=0)[0]))
    top = len(adapter.tokenizer)  # completion ids the tokenizer knows (the embedding has more rows)
    generator = torch.Generator().manual_seed(1)
    completions = [torch.randint(0, top, (tokens,), generator=generator).tolist() for _ in range(batch)]
    cuda = device == "cuda"
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        baseline = torch.cuda.memory_allocated()
    t0 = time.perf_counter()
    scored = adapter.completion_logprobs(model, [prompt] * batch, completions, micro_batch_size=batch)
    scored.logprobs[scored.mask.bool()].float().sum().backward()
    if cuda:
        torch.cuda.synchronize()
    tail_s = time.perf_counter() - t0
    peak = (torch.cuda.max_memory_allocated() - baseline) / 2**30 if cuda else None
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    return {
        "batch": batch,
        "tokens": tokens,
        "vocab": vocab,
        "hidden": hidden,
        "dtype": dtype,
        "device": device,
        "peak_above_model_gib": peak,
        "tail_s": tail_s,
        "ok": bool(grads) and all(bool(torch.isfinite(g).all()) for g in grads),
    }


LORA_VARIANTS = {  # agents[i] / train settings of each variant of the lora section
    "lora": ({"lora": {"r": 16, "alpha": 32}}, {}),
    "frozen_vision": ({}, {"freeze": ["vision_tower", "projector"]}),
}


def lora(
    model: str,
    *,
    dtype: str = "bfloat16",
    problems: int = 2,
    k: int = 4,
    max_new_tokens: int = 96,
    micro_batch_size: int = 4,
) -> dict[str, Any]:
    """One agent in each of :data:`LORA_VARIANTS`, one training step (RENT: every completion trains) with the
    HF engine: trained parameters, peak memory (CUDA only, else ``None``) next to the plan's, and whether the
    weights that must not train stayed bit-identical while the trained ones moved."""
    import gc

    import torch

    from corl_vl.config import config_from_dict
    from corl_vl.recipe import build_cohort
    from model_adapters.registry import create_adapter

    device = _device()
    cuda = device == "cuda"
    view = _problems(create_adapter(model, dtype=dtype), problems, seed=7)
    out: dict[str, Any] = {"model": model, "dtype": dtype, "device": device, "variants": {}}
    for variant, (agent_extra, train_extra) in LORA_VARIANTS.items():
        gc.collect()
        if cuda:
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
        train = {"lr": 1e-4, "warmup_ratio": 0, "max_steps": 1, **train_extra}
        cfg = config_from_dict(
            _solo(model, dtype, problems, k, max_new_tokens, micro_batch_size, train, agent_extra)
        )
        cohort = build_cohort(cfg, device=device, problems=view)
        agent = cohort.agents[0]
        named = dict(agent.model.named_parameters())
        fixed = next(n for n, p in named.items() if not p.requires_grad)  # one tensor that must not move
        trained_names = [n for n, p in named.items() if p.requires_grad]
        moving = next((n for n in trained_names if ".lora_B." in n), trained_names[-1])
        before = {n: named[n].detach().clone() for n in (fixed, moving)}
        metrics = cohort.step()["solo"]
        peak = torch.cuda.max_memory_allocated() if cuda else None
        out["variants"][variant] = {
            "trained_parameters": sum(named[n].numel() for n in trained_names),
            "all_parameters": sum(p.numel() for p in named.values()),
            "peak_memory_gib": peak / 2**30 if peak is not None else None,
            "plan": plan_prediction(cfg),
            "frozen_unchanged": bool(torch.equal(named[fixed].detach(), before[fixed])),
            "trained_moved": not torch.equal(named[moving].detach(), before[moving]),
            "update_skipped": metrics["update/skipped"],
        }
        del cohort, agent, named, before
    out["ok"] = all(
        v["frozen_unchanged"] and v["trained_moved"] and v["update_skipped"] == 0.0
        for v in out["variants"].values()
    )
    return out
