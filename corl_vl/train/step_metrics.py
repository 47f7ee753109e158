"""Reward, label and completion statistics of one agent's step (monitoring only: golds are read here and never
reach a reward)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from corl_vl.answers import vote
from corl_vl.answers.equivalence import equivalent


def step_metrics(
    ids: list[str], agent_step: Any, rewards: torch.Tensor, base: Mapping[str, Any], uses_peers: bool
) -> dict[str, float]:
    """Reward, label and completion statistics of one agent's step (monitoring only)."""
    comps = [c for r in agent_step.rollouts for c in r.completions]
    lengths = [len(c.ids) for c in comps]
    m: dict[str, float] = {
        "reward/mean": float(rewards.mean()),
        "reward/std": float(rewards.std()) if rewards.numel() > 1 else 0.0,
        "groups/zero_std_frac": float((rewards.std(dim=1) == 0).float().mean())
        if rewards.shape[1] > 1
        else 1.0,
        "length/mean": sum(lengths) / len(lengths),
        "length/min": float(min(lengths)),
        "length/max": float(max(lengths)),
        "length/clipped_frac": sum(c.clipped for c in comps) / len(comps),
        "answer/parsed_frac": sum(a is not None for pid in ids for a in agent_step.answers[pid]) / len(comps),
    }
    gold = {pid: base[pid].answer for pid in ids if base[pid].answer is not None}
    choices = {pid: base[pid].choices for pid in ids}
    if gold:
        hits = [equivalent(gold[pid], a, choices[pid]) for pid in gold for a in agent_step.answers[pid]]
        m["answer/accuracy"] = sum(hits) / len(hits)
    if agent_step.labels:
        labelled = [pid for pid in ids if agent_step.labels.get(pid) is not None]
        m["label/coverage"] = len(labelled) / len(ids)
        checked = [pid for pid in labelled if pid in gold]
        if checked:  # monitoring only: never used to select checkpoints
            m["label/accuracy"] = sum(
                equivalent(gold[p], agent_step.labels[p], choices[p]) for p in checked
            ) / len(checked)
        agree = []
        for pid in labelled if uses_peers else []:
            own = vote(agent_step.answers[pid], choices=choices[pid]).label
            if own is not None:
                agree.append(equivalent(agent_step.labels[pid], own, choices[pid]))
        if agree:
            m["peer/agreement"] = sum(agree) / len(agree)
    return m
