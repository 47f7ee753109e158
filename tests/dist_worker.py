"""One cohort run for tests/test_distributed.py: under ``torchrun`` (one agent per process, ZeRO-2) or as a
plain process (the single-process reference). Not a test module itself (no ``test_`` prefix).

Usage: ``python dist_worker.py OUT_DIR [--deepspeed JSON|none] [--max-steps N] [--save-every N] [--resume]
[--gpus A,B] [--tp T] [--solo] [--engine hf|vllm] [--freeze PART,…] [--lora AGENT,…] [--set KEY=VALUE …] [--backend NAME] [--turns-log FILE] [--strict-vllm DIR] [--stop-at-once]``
(optionally under ``torchrun --nproc_per_node=2``; the JSON defaults to ZeRO-2, ``none``: each agent's own Torch
backend; steps to 2). ``--backend corl_vl_cuda_only`` builds each agent's world on a backend with NCCL's device rule
(CUDA tensors only, gloo inside); ``--turns-log`` appends every turn a process takes on its (shared) GPU;
``--strict-vllm`` makes every vLLM engine follow vLLM's GPU life-cycle rules (tests/strict_vllm.py). Writes the run to
``OUT_DIR/run`` and, per rank, ``OUT_DIR/rank-<r>.json`` with what the test asserts on: which agent the rank
held, the ids of the answers it received for every agent, the labels it computed, whether its parameters moved,
and the token ids its engine sampled (per generate call, by problem id: the ranks of a TP group must agree).

Random tiny models never write a parseable answer, so each engine's reported *text* is derived from its real
sampled token ids (as in test_checkpoint): controlled reward input, not a mock of the model.
"""

from __future__ import annotations

import faulthandler
import json
import os
import signal
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from corl_vl.paths import configure_cache_env

configure_cache_env()

ROOT = Path(__file__).resolve().parent.parent
ZERO2 = ROOT / "configs" / "deepspeed" / "zero2.json"


class ForcedTexts:
    """A real engine whose completions report ``\\boxed{1}`` unless (first sampled id + agent) is divisible by 4.

    Mostly-1 answers give labels on most problems and rewards that vary within a group, so both agents train.
    """

    def __init__(self, engine, agent_index: int) -> None:
        self.engine, self.agent_index = engine, agent_index
        self.sampled: list[dict[str, list[list[int]]]] = []
        self.syncs = 0

    def generate(self, problems, **kwargs):
        rollouts = self.engine.generate(problems, **kwargs)
        self.sampled.append({r.problem_id: [list(c.ids) for c in r.completions] for r in rollouts})
        for r in rollouts:
            for c in r.completions:
                c.text = f"\\boxed{{{int(((c.ids or [0])[0] + self.agent_index) % 4 != 0)}}}"
        return rollouts

    def sync_weights(self, model):
        self.syncs += 1
        self.engine.sync_weights(model)

    @property
    def needs_weights(self):  # the wrapped engine's (a level-2 sleep drops vLLM's weights)
        return getattr(self.engine, "needs_weights", False)

    @property
    def reads_trainer_weights(self):
        return getattr(self.engine, "reads_trainer_weights", True)

    def sleep(self):
        self.engine.sleep()

    def wake(self, tags=None):
        self.engine.wake(tags)


CUDA_ONLY = "corl_vl_cuda_only"


def register_cuda_only_backend() -> None:
    """A torch.distributed backend with NCCL's device rule: it serves CUDA tensors only, so any CPU tensor sent
    into an agent's world fails as on a GPU node ("No backend type associated with device type cpu")."""
    import torch.distributed as tdist

    def create(store, rank, size, timeout):
        return tdist.ProcessGroupGloo(store, rank, size, timeout)

    tdist.Backend.register_backend(CUDA_ONLY, create, devices=["cuda"])


def log_turns(path: Path) -> None:
    """Append ``enter``/``exit`` lines (cohort rank, turn label) for every turn, under a file lock."""
    import contextlib
    import fcntl

    from corl_vl.train.device_turns import DeviceTurns

    inner = DeviceTurns.turn

    def write(line: str) -> None:
        with path.open("a") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            f.write(line + "\n")

    @contextlib.contextmanager
    def turn(self, label):
        with inner(self, label):
            write(f"enter {self.members[self.position]} {label}")
            yield
            write(f"exit {self.members[self.position]} {label}")

    DeviceTurns.turn = turn


MODELS = ("tiny-qwen2.5", "tiny-llama3")  # agents "qwen" and "llama" (names kept whatever --models says)


def config(
    out: Path,
    distributed: bool,
    ds_config: Path = ZERO2,
    max_steps: int = 2,
    save_every: int = 0,
    models: tuple[str, str] = MODELS,
    problems_per_step: int = 2,
    gpus: tuple[int, int] | None = None,
    tp: int = 1,
    solo: bool = False,
    engine: str = "auto",
    freeze: tuple[str, ...] = (),
    lora: tuple[str, ...] = (),
):
    """The test cohort; ``freeze``: train.freeze, ``lora``: the agents that train LoRA adapters (r 4); ``solo``: qwen alone with TTRL's self-reward (a one-agent cohort), ``tp``: rollout TP,
    ``engine``: rollout.engine (auto picks HF for these tiny models; vllm forces vLLM)."""
    from corl_vl.config import config_from_dict

    counts = gpus or (None, None)
    raw = {
        "agents": [
            {"name": "qwen", "model": models[0], "gpus": counts[0]},
            {"name": "llama", "model": models[1], "gpus": counts[1]},
        ],
        "reward": {"topology": "mutual"},
        "data": {"train": "synthetic", "limit": 4, "problems_per_step": problems_per_step},
        "grpo": {"k": 4, "max_new_tokens": 6, "micro_batch_size": 4},
        "rollout": {"batch_size": 8, "tensor_parallel_size": tp, "engine": engine},
        "train": {
            "max_steps": max_steps,
            "save_every": save_every,
            "lr": 1e-3,
            "warmup_ratio": 0,
            "scheduler": "constant",
            "plot": False,
            "output_dir": str(out / "run"),
            "seed": 0,
            "freeze": list(freeze),
        },
        "distributed": {"deepspeed": str(ds_config) if distributed and ds_config else None},
    }
    for agent in raw["agents"]:
        if agent["name"] in lora:
            agent["lora"] = {"r": 4, "alpha": 8}
    if solo:
        raw["agents"], raw["reward"] = raw["agents"][:1], {"name": "ttrl"}
    return config_from_dict(raw, "dist_worker")


def _params(agent) -> list:
    """Whole copies of the agent's parameters (ZeRO-3 keeps only partitions on the module: gather them)."""
    with agent.full_weights():
        return [p.detach().clone() for p in agent.model.parameters()]


def run_worker(
    out: Path,
    ds_config: Path = ZERO2,
    *,
    max_steps: int = 2,
    save_every: int = 0,
    resume: bool = False,
    models: tuple[str, str] = MODELS,
    problems_per_step: int = 2,
    gpus: tuple[int, int] | None = None,
    tp: int = 1,
    solo: bool = False,
    engine: str = "auto",
    backend: str | None = None,
    utilization: float | None = None,
    freeze: tuple[str, ...] = (),
    lora: tuple[str, ...] = (),
    overrides: tuple[str, ...] = (),
) -> list[dict]:
    """Train; returns (and writes) one record per agent this process held."""
    import torch

    from corl_vl.recipe import train
    from corl_vl.train.distributed import launched_world_size

    distributed = launched_world_size() > 1
    state: dict = {"steps": [], "rewards": []}

    def prepare(cohort):
        for index, agent in zip(cohort.indices, cohort.agents):
            agent.engine = ForcedTexts(agent.engine, index)
            state.setdefault("engines", {})[agent.name] = agent.engine
        state["before"] = {a.name: _params(a) for a in cohort.agents}
        inner = cohort.step

        def step():
            metrics = inner()
            state["steps"].append(
                {
                    "answer_ids": {name: list(ans) for name, ans in cohort.last_answers.items()},
                    "labels": cohort.last_labels,
                }
            )
            state["rewards"].append(  # this rank's share: {agent: {problem id: [K rewards]}}
                {
                    a.name: {pid: [float(x) for x in r] for pid, r in s.rewards.items()}
                    for a, s in zip(cohort.agents, cohort.last)
                }
            )
            return metrics

        cohort.step = step
        state["cohort"] = cohort

    cfg = config(
        out,
        distributed,
        ds_config,
        max_steps,
        save_every,
        models,
        problems_per_step,
        gpus,
        tp,
        solo,
        engine,
        freeze,
        lora,
    )
    if overrides:  # --set: any other option, checked as corl-vl train checks it
        from corl_vl.config import apply_overrides, finalize

        cfg = finalize(apply_overrides(cfg, list(overrides)), "dist_worker --set")
    if backend is not None:  # past the config's check of backend names: a test backend
        cfg.distributed.backend = backend
    if utilization is not None:
        cfg.rollout.gpu_memory_utilization = utilization
    train(cfg, resume=resume, progress=False, prepare=prepare)
    cohort = state["cohort"]
    records = []
    for agent in cohort.agents:
        before = state["before"][agent.name]
        changed = [not torch.equal(a, b) for a, b in zip(_params(agent), before)]
        records.append(
            {
                "agent": agent.name,
                "rank": cohort.dist.rank if cohort.dist else 0,
                "world_size": cohort.dist.world_size if cohort.dist else 1,
                "group_ranks": cohort.dist.group_ranks if cohort.dist else [0],
                "deepspeed": type(agent.backend).__name__ == "DeepSpeedBackend",
                "changed_tensors": sum(changed),
                "tensors": len(changed),
                "steps": state["steps"],
                "rewards": state["rewards"],
                "sampled": state["engines"][agent.name].sampled,
                "syncs": state["engines"][agent.name].syncs,
                "engine": type(state["engines"][agent.name].engine).__name__,
            }
        )
    name = f"rank-{cohort.dist.rank}.json" if cohort.dist else "single.json"
    name = name.replace(".json", "-resumed.json") if resume else name
    (out / name).write_text(json.dumps(records, indent=1))
    if cohort.dist is not None:
        import torch.distributed as tdist

        tdist.destroy_process_group()
    return records


if __name__ == "__main__":
    faulthandler.register(
        signal.SIGTERM, chain=True
    )  # a hung worker stopped by a timeout prints where it hung
    import argparse

    from torchrun_launch import exit_without_teardown

    from corl_vl.cli import configure_logging

    configure_logging("info")  # corl-vl's own lines (the placement plan) to stderr, as `corl-vl train` does
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("--deepspeed", type=lambda v: None if v == "none" else Path(v), default=ZERO2)
    parser.add_argument("--backend", help="each agent's torch.distributed backend (distributed.backend)")
    parser.add_argument("--turns-log", type=Path, help="append each turn on the shared GPU to this file")
    parser.add_argument(
        "--strict-vllm", type=Path, help="vLLM's GPU life-cycle rules (strict_vllm), this ledger"
    )
    parser.add_argument("--gpu-memory-utilization", type=float, help="rollout.gpu_memory_utilization")
    parser.add_argument("--max-steps", type=int, default=2)
    parser.add_argument("--save-every", type=int, default=0)
    parser.add_argument("--resume", action="store_true")
    parser.add_argument(
        "--models", default=",".join(MODELS), help="two presets, e.g. tiny-qwen2.5-vl,tiny-internvl3.5"
    )
    parser.add_argument("--problems-per-step", type=int, default=2)
    parser.add_argument("--gpus", help="each agent's agents[i].gpus, e.g. 3,1 (default: an equal share)")
    parser.add_argument("--tp", type=int, default=1, help="rollout.tensor_parallel_size")
    parser.add_argument("--solo", action="store_true", help="one agent (qwen) with TTRL's self-reward")
    parser.add_argument("--engine", default="auto", help="rollout.engine: auto, hf or vllm")
    parser.add_argument("--freeze", default="", help="train.freeze, comma-separated parts (e.g. lm_head)")
    parser.add_argument("--lora", default="", help="the agents that train LoRA adapters, e.g. qwen")
    parser.add_argument("--set", action="append", default=[], help="KEY=VALUE, as corl-vl train --set")
    parser.add_argument(
        "--stop-at-once", action="store_true", help="SIGTERM ends the process (no finish-the-step-and-save)"
    )
    a = parser.parse_args()
    if a.stop_at_once:
        # a run expected to fail: torchrun SIGTERMs the surviving rank and waits 30 s (fixed) before SIGKILL,
        # which the graceful stop (finish the step, save) would use up
        from corl_vl.train import interrupts

        interrupts._SIGNALS = (signal.SIGINT,)
    models = tuple(a.models.split(","))
    if a.backend == CUDA_ONLY:
        register_cuda_only_backend()
    if a.turns_log:
        log_turns(a.turns_log)
    if a.strict_vllm:
        from strict_vllm import install

        install(None, a.strict_vllm)
    run_worker(
        a.out,
        a.deepspeed,
        max_steps=a.max_steps,
        save_every=a.save_every,
        resume=a.resume,
        models=models,
        problems_per_step=a.problems_per_step,
        gpus=tuple(int(g) for g in a.gpus.split(",")) if a.gpus else None,
        tp=a.tp,
        solo=a.solo,
        engine=a.engine,
        backend=a.backend,
        utilization=a.gpu_memory_utilization,
        freeze=tuple(filter(None, a.freeze.split(","))),
        lora=tuple(filter(None, a.lora.split(","))),
        overrides=tuple(a.set),
    )
    exit_without_teardown()  # everything the test reads is written and closed by now
