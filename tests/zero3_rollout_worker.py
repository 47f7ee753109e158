"""One rank of tests/test_zero3_rollout.py (run under ``torchrun``, gloo). Not a test module itself.

Usage: ``zero3_rollout_worker.py OUT_DIR``. One agent (tiny Qwen2.5) on both ranks as a DeepSpeed ZeRO-3 engine;
it rolls out once with an engine that generates from the trainer's module (HF) and once with one that samples
from its own synced copy (as vLLM does). Each engine records, while it generates, whether the trainer's largest
parameter was gathered whole on this rank, and the seed stream it was given. Results: ``OUT_DIR/rank-<r>.json``.
"""

from __future__ import annotations

import copy
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from corl_vl.paths import configure_cache_env

configure_cache_env()

ROOT = Path(__file__).resolve().parent.parent


def main(out: Path) -> None:
    from corl_vl.config import config_from_dict
    from corl_vl.data.synth import generate_problems, to_text_problem
    from corl_vl.rollout.hf import HFEngine
    from corl_vl.train.agent import Agent, AgentSettings
    from corl_vl.train.backends import launch_backend
    from corl_vl.train.distributed import setup
    from model_adapters.registry import create_adapter

    dist = setup([None], names=["qwen"], backend="gloo")
    cfg = config_from_dict(
        {
            "agents": [{"name": "qwen", "model": "tiny-qwen2.5"}],
            "reward": {"name": "ttrl"},
            "data": {"limit": 4, "problems_per_step": 4},
            "grpo": {"k": 2, "max_new_tokens": 4},
            "distributed": {"deepspeed": str(ROOT / "configs" / "deepspeed" / "zero3.json")},
        },
        "zero3_rollout_worker",
    )
    adapter = create_adapter("tiny-qwen2.5")
    model = adapter.load_model().train()
    problems = [to_text_problem(p) for p in generate_problems(4, seed=2)]
    observed: dict[str, list] = {}

    class Probe(HFEngine):
        def generate(self, problems, **kwargs):
            largest = max(trainer.parameters(), key=lambda p: p.ds_numel)
            observed.setdefault(self.label, []).append(
                {"whole": largest.numel() == largest.ds_numel, "stream": kwargs.get("seed_stream")}
            )
            return super().generate(problems, **kwargs)

    reading = Probe(adapter, model)  # samples from the trainer's module
    reading.label = "reads_module"
    own = Probe(adapter, copy.deepcopy(model))  # its own copy, synced: what vLLM is to the trainer
    own.label, own.reads_trainer_weights = "own_copy", False
    agent = Agent("qwen", adapter, model, problems, AgentSettings.of(cfg), engine=reading)
    agent.backend = launch_backend(agent.backend, cfg.distributed, dist, cfg.train, cfg.optimizer)
    trainer = agent.model
    ids = dist.my_share([p.id for p in problems])
    for engine in (reading, own):
        agent.engine = engine
        agent.rollout(ids, seed=1)
    (out / f"rank-{dist.rank}.json").write_text(json.dumps(observed))
    import torch.distributed

    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    from torchrun_launch import exit_without_teardown

    main(Path(sys.argv[1]))
    exit_without_teardown()  # the results are written
