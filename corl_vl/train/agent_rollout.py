"""An agent's rollout engine: built sized to the agent's data, and driven for one rollout.

Why apart from :mod:`corl_vl.train.agent`: what the engine is told (vLLM's context length, image limit, sleep
level, weight checksum; see :mod:`corl_vl.rollout.sizing`) and how a rollout runs around it (which weights to
gather, which seed stream) are decisions about the engine, not about the update.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist

from corl_vl.config import RolloutConfig
from corl_vl.errors import CorlError
from corl_vl.eval.generate import context_length
from corl_vl.rollout import (
    Rollout,
    RolloutEngine,
    check_one_vllm_engine_per_process,
    create_engine,
    planned_engine,
    resolve_engine,
)
from corl_vl.rollout.hf import NonFiniteLogits
from corl_vl.rollout.sizing import (
    check_images,
    default_max_model_len,
    longest_prompt,
    seed_stream,
    sleep_level,
)
from corl_vl.train.nonfinite import rollout_error
from corl_vl.train.prompt_room import check_prompt_room

_log = logging.getLogger("corl_vl.train.agent")


def build_engine(
    name: str, adapter: Any, model: Any, view: Sequence[Any], rollout: RolloutConfig, max_new_tokens: int
) -> RolloutEngine:
    """The engine ``rollout`` (the config's section) names for this agent (``auto``: by model size), sized to
    its ``view`` and ``max_new_tokens`` (``grpo.max_new_tokens``)."""
    kind, why = resolve_engine(rollout.engine, model, vllm_min_params=rollout.vllm_min_params)
    _log.info("agent %s: rollout engine %s (%s)", name, kind, why)
    options: dict[str, Any] = {
        "batch_size": rollout.batch_size,
        "kv_cache_memory_bytes": rollout.kv_cache_memory_bytes,
        "gpu_memory_utilization": rollout.gpu_memory_utilization,
        "sleep_between_phases": rollout.sleep_between_phases,
        "tensor_parallel_size": rollout.tensor_parallel_size,
    }
    if kind == "vllm":
        device = next(model.parameters()).device
        if device.type == "cuda":
            check_vllm_device(name, device.index or 0, torch.cuda.current_device())
        options.update(vllm_sizing(name, adapter, model, view, rollout, max_new_tokens))
    return create_engine(kind, adapter, model, **options)


def refuse_two_vllm_engines(rollout: RolloutConfig, adapters: dict[str, Any], homes: dict[int, Any]) -> None:
    """Before any model loads: one process on a GPU holds at most one vLLM engine (its sleep allocator is one per
    process, so one agent's sleep would free the other's memory). ``adapters``: each agent's by name;
    ``homes``: each agent index's device."""
    if not any(str(home).startswith("cuda") for home in homes.values()):
        return
    planned = {
        name: planned_engine(rollout.engine, adapter, vllm_min_params=rollout.vllm_min_params)
        for name, adapter in adapters.items()
    }
    check_one_vllm_engine_per_process(planned, "cuda")


def check_vllm_device(name: str, index: int, current: int) -> None:
    """vLLM builds its engine on the process's current CUDA device: an agent trained on another GPU of a
    one-process run would fill that one with its engine, where the memory plan does not count it."""
    if index != current:
        raise CorlError(
            f"agent {name}: trains on cuda:{index}, but vLLM would build its engine on cuda:{current} (one process "
            "holds every agent); set rollout.engine: hf, pin the vLLM agents to one GPU (agents[i].devices: "
            "[cuda:0]; they take turns), or launch one process per GPU (distributed.deepspeed, docs/scaling.md)"
        )


def vllm_sizing(
    name: str, adapter: Any, model: Any, view: Sequence[Any], rollout: RolloutConfig, max_new: int
) -> dict[str, Any]:
    """vLLM's options for training on ``view``: image limit (checked on every problem), context length
    (``rollout.max_model_len``, or the longest prompt rendered here + ``grpo.max_new_tokens``), sleep level 2
    (the agent syncs the weights after every update), and the post-sync checksum."""
    try:
        check_images(view, rollout.max_images_per_prompt)
    except CorlError as err:
        raise CorlError(f"agent {name}: {err}") from None
    max_len = rollout.max_model_len
    if max_len is None:
        tokens, problem = longest_prompt(adapter, view)
        max_len = default_max_model_len(tokens, max_new)
        context = context_length("", model)
        if context is not None and max_len > context:  # the prompt itself cannot fit: the rollout refuses it
            max_len = context
        _log.info(
            "agent %s: vLLM max_model_len %d (longest prompt %d tokens, problem %r, + %d new tokens)",
            name,
            max_len,
            tokens,
            problem,
            max_new,
        )
    return {
        "max_model_len": max_len,
        "max_images_per_prompt": rollout.max_images_per_prompt,
        "sleep_level": sleep_level(weights_synced_every_step=True),
        "weight_checksum": rollout.weight_checksum,
    }


def rank_stream(backend: Any, tensor_parallel_size: int) -> tuple[int, int]:
    """This rank's seed stream in its agent's group (the backend's data-parallel group; one stream without)."""
    group = getattr(backend, "dp_group", None)
    if group is None:
        return 0, 1

    return seed_stream(dist.get_rank(group), dist.get_world_size(group), tensor_parallel_size)


def generation_weights(agent: Any, engine: Any) -> contextlib.AbstractContextManager[Any]:
    """Whole weights for an engine that generates from the trainer's module (ZeRO-3 gathers them); nothing
    for one with its own synced copy (vLLM), which never reads the module."""
    if getattr(engine, "reads_trainer_weights", True):
        return agent.backend.inference_weights()
    return contextlib.nullcontext()


def run_rollout(
    agent: Any, ids: Sequence[str], *, seed: int, prompts: Sequence[Any] | None = None
) -> tuple[list[Any], list[Rollout]]:
    """:meth:`corl_vl.train.agent.Agent.rollout`: encode (unless given), sample, check the ids came back."""
    problems = agent.problems(ids)
    prompts = list(prompts) if prompts is not None else agent.encode(ids)
    grpo = agent.settings.grpo
    check_prompt_room(agent.name, agent.model, prompts, grpo.max_new_tokens)
    engine = agent.prepare_engine()
    # passed only when set, so an engine written before the option needs no new keyword
    extra: dict[str, Any] = {"min_new_tokens": grpo.min_new_tokens} if grpo.min_new_tokens else {}
    stream = rank_stream(agent.backend, agent.settings.rollout.tensor_parallel_size)
    if stream[1] > 1:
        extra["seed_stream"] = stream
    samples = grpo.votes or grpo.k  # grpo.votes: more completions for the vote, k of them trained
    try:
        with generation_weights(agent, engine):
            rollouts = engine.generate(
                problems,
                k=samples,
                temperature=grpo.temperature,
                top_p=grpo.top_p,
                max_new_tokens=grpo.max_new_tokens,
                seed=seed,
                prompts=prompts,
                **extra,
            )
    except NonFiniteLogits as err:  # which weights and checkpoint, not only which engine
        raise rollout_error(agent, err) from None
    except CorlError as err:  # e.g. a failure inside vLLM: also say whose engine it is
        raise CorlError(f"agent {agent.name}: {err}") from err
    got = [r.problem_id for r in rollouts]
    if got != list(ids):
        raise CorlError(f"agent {agent.name}: rollout engine returned problems {got}, asked for {list(ids)}")
    for r in rollouts:
        if len(r.completions) != samples:
            raise CorlError(
                f"agent {agent.name}: {len(r.completions)} completions for {r.problem_id}, expected {samples}"
            )
    return prompts, rollouts
