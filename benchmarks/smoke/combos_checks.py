"""What each option of a combination row claims, checked on the run it made.

In-process rows (HF rollout, one process) compare every parameter before and after the run: a parameter that
does not train (frozen part, a LoRA agent's base) must be bit-identical, the named part must really be frozen,
a LoRA agent may train only its adapters. Subprocess rows (vLLM, torchrun) compare the saved checkpoint with
the agent's base by tensor name (a part is recognised by the names its family saves it under:
:data:`SAVED_PARTS`). Every check returns "" when it holds, else one line saying what did not.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

PEFT_PREFIX = "base_model.model."
# the names a part's tensors are saved under (model.safetensors), for both VLM families of the demo
SAVED_PARTS = {
    "vision_tower": ("visual.blocks.", "visual.patch_embed.", "vision_tower."),
    "lm_head": ("lm_head.", "language_model.lm_head."),
}
# a LoRA agent's merged checkpoint may differ from its base only in the adapted decoder projections
LORA_TARGET = re.compile(r"layers\.\d+\.(self_attn|mlp)\.\w+_proj\.(weight|bias)$")


def snapshot(model: Any) -> dict[str, Any]:
    return {name: p.detach().clone() for name, p in model.named_parameters()}


def in_process_claims(row: dict[str, str], cohort: Any, before: dict[str, dict[str, Any]]) -> list[str]:
    """Frozen parameters unchanged, the named part frozen, LoRA trains only adapters (per agent)."""
    import torch

    problems = []
    for agent in cohort.agents:
        params = dict(agent.model.named_parameters())
        old = before[agent.name]
        moved_frozen = [
            n for n, p in params.items() if not p.requires_grad and not torch.equal(old[n], p.detach())
        ]
        if moved_frozen:
            problems.append(f"{agent.name}: frozen {moved_frozen[0]} changed")
        part = row.get("freeze", "none")
        if part != "none":
            prefixes = agent.adapter.model_parts(_unwrapped(agent.model)).get(part, ())
            named = [n for n in params if prefixes and n.removeprefix(PEFT_PREFIX).startswith(prefixes)]
            if not named and agent.adapter.supports_images:
                problems.append(f"{agent.name}: no parameter of part {part}")
            if any(params[n].requires_grad for n in named):
                problems.append(f"{agent.name}: part {part} still trains")
        if row.get("lora") == agent.name:
            trainable = [n for n, p in params.items() if p.requires_grad]
            if not trainable or any("lora_" not in n for n in trainable):
                problems.append(f"{agent.name}: LoRA agent trains non-adapter weights ({trainable[:1]})")
    return problems


def _unwrapped(model: Any) -> Any:
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def weights_close(a: dict[str, Any], b: dict[str, Any], atol: float = 1e-5) -> str:
    """ "" when every shared tensor agrees within ``atol`` (fp32 arithmetic in another order), else the worst."""
    worst, where = 0.0, ""
    for name in sorted(set(a) & set(b)):
        diff = (a[name].float() - b[name].float()).abs().max().item() if a[name].numel() else 0.0
        if diff > worst:
            worst, where = diff, name
    if set(a) != set(b):
        return f"different tensors ({len(set(a) ^ set(b))} not in both)"
    return f"{where} differs by {worst:.2e}" if worst > atol else ""


def saved_weights(run_dir: Path, agent: str) -> dict[str, Any]:
    from safetensors.torch import load_file

    out: dict[str, Any] = {}
    for file in sorted((run_dir / "checkpoints" / "latest" / agent).glob("*.safetensors")):
        out.update(load_file(file))
    return out


def folder_claims(row: dict[str, str], run_dir: Path, bases: dict[str, Path]) -> list[str]:
    """The subprocess rows' claims, from the latest checkpoint against each agent's base."""
    problems = []
    for agent, base in bases.items():
        new, old = saved_weights(run_dir, agent), {}
        for file in sorted(base.glob("*.safetensors")):
            from safetensors.torch import load_file

            old.update(load_file(file))
        if not new:
            problems.append(f"{agent}: no saved weights")
            continue
        changed = {k for k in set(new) & set(old) if not new[k].equal(old[k])}
        part = row.get("freeze", "none")
        if part in SAVED_PARTS:
            keys = [k for k in old if k.startswith(SAVED_PARTS[part])]
            if part == "vision_tower" and not keys and any("visual" in k or "vision" in k for k in old):
                problems.append(f"{agent}: no tensor of part {part} found")
            if changed & set(keys):
                problems.append(f"{agent}: frozen {sorted(changed & set(keys))[0]} changed")
        if row.get("lora") == agent:
            outside = sorted(k for k in changed if not LORA_TARGET.search(k))
            if outside:
                problems.append(f"{agent}: LoRA agent changed {outside[0]} (not an adapted projection)")
            if not list((run_dir / "checkpoints" / "latest").glob(f"state/{agent}/lora")):
                problems.append(f"{agent}: checkpoint has no state/{agent}/lora")
    return problems


def run_dir_claims(row: dict[str, str], run_dir: Path, steps: int) -> list[str]:
    """Completion logs (at most N rows per agent and step, some written) and save limits (one checkpoint)."""
    problems = []
    if row.get("completion_log", "0") != "0":
        most = int(row["completion_log"])
        logs = sorted((run_dir / "agents").glob("*/completions.jsonl"))
        if not logs:
            problems.append("no completions.jsonl written")
        for log in logs:
            n = sum(1 for line in log.read_text().splitlines() if line.strip())
            if not 0 < n <= most * steps:
                problems.append(f"{log.parent.name}: {n} completion rows for {steps} step(s) x {most}")
    if row.get("save_limit", "none") != "none":
        kept = sorted(p.name for p in (run_dir / "checkpoints").glob("step-*"))
        if len(kept) != int(row["save_limit"]):
            problems.append(f"save_total_limit {row['save_limit']}: checkpoints kept {kept}")
    return problems


def metrics(run_dir: Path) -> dict[str, list[dict[str, Any]]]:
    return {
        m.parent.name: [json.loads(line) for line in m.read_text().splitlines() if line.strip()]
        for m in sorted((run_dir / "agents").glob("*/metrics.jsonl"))
    }


def resume_claims(straight: Path, resumed: Path) -> list[str]:
    """1 step + resume equals 2 straight steps: every agent's saved weights (fp32 tolerance) and last step's
    loss."""
    problems = []
    a, b = metrics(straight), metrics(resumed)
    if not a:
        return ["resume check: the straight run logged no metrics"]
    for agent in a:
        ours, theirs = saved_weights(straight, agent), saved_weights(resumed, agent)
        if not ours or not theirs:
            problems.append(f"resume check: {agent} has no saved weights in one of the runs")
            continue
        gap = weights_close(ours, theirs)
        if gap:
            problems.append(f"resume != straight: {agent} {gap}")
        last_a, last_b = (a.get(agent) or [{}])[-1], (b.get(agent) or [{}])[-1]
        la, lb = last_a.get("loss"), last_b.get("loss")
        if la is None or lb is None or abs(float(la) - float(lb)) > 1e-4 * max(1.0, abs(float(la))):
            problems.append(f"resume != straight: {agent} last loss {la} vs {lb}")
    return problems
