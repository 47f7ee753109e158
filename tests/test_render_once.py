"""Render once: the prompt ids the trainer scores are exactly the ones every engine generates from.

Each test feeds an engine prompts rendered on one "day" (a pinned template date) while the engine's own adapter
would render another day's prompt: the engine must generate from the given ids and never render again, so no
clock or template state on the engine side can make rollouts and training diverge.
"""

from __future__ import annotations

import pytest
import torch

from corl_vl.config import config_from_dict
from corl_vl.data.problem import Problem
from corl_vl.errors import CorlError
from corl_vl.rollout.hf import HFEngine
from model_adapters import create_adapter

PROBLEMS = [Problem("a", "What is 2 + 3?"), Problem("b", "Compute 4 times 5.", choices=["20", "9"])]
GREEDY = {"k": 1, "temperature": 0.0, "top_p": 1.0, "max_new_tokens": 5, "seed": 0}


def _days():
    """The same model family on two days: the trainer's rendering and a different-day rendering."""
    monday = create_adapter("tiny-llama3", template_date="2026-11-30")
    tuesday = create_adapter("tiny-llama3", template_date="2026-12-01")
    return monday, tuesday


def _no_rendering(adapter, monkeypatch) -> None:
    def refuse(*_a, **_k):
        raise AssertionError("an engine rendered a prompt again")

    monkeypatch.setattr(adapter, "render_prompt", refuse)


def test_hf_engine_generates_from_the_given_rendering(monkeypatch):
    monday, tuesday = _days()
    prompts = [monday.encode_prompt(p) for p in PROBLEMS]
    assert prompts[0].prompt_ids != tuesday.encode_prompt(PROBLEMS[0]).prompt_ids  # the days do differ
    model = monday.load_model()
    _no_rendering(tuesday, monkeypatch)
    rollouts = HFEngine(tuesday, model).generate(PROBLEMS, prompts=prompts, **GREEDY)
    for prompt, rollout in zip(prompts, rollouts):
        ids = torch.tensor([prompt.prompt_ids])
        with torch.no_grad():
            out = model.generate(
                ids,
                attention_mask=torch.ones_like(ids),
                do_sample=False,
                max_new_tokens=5,
                eos_token_id=monday.stop_token_ids,
                pad_token_id=monday.pad_token_id,
            )
        expected = out[0, ids.shape[1] :].tolist()
        assert rollout.completions[0].ids == expected[: len(rollout.completions[0].ids)]


def test_agent_rollout_renders_each_problem_once_and_scores_what_was_generated():
    from corl_vl.train.agent import Agent, AgentSettings

    adapter = create_adapter("tiny-llama3")
    model = adapter.load_model().train()
    seen: list = []

    class Recording(HFEngine):
        def generate(self, problems, **kwargs):
            seen.append(kwargs["prompts"])
            return super().generate(problems, **kwargs)

    calls = []
    render = adapter.render_prompt
    adapter.render_prompt = lambda problem: calls.append(problem.id) or render(problem)
    cfg = config_from_dict(
        {
            "agents": [{"name": "a", "model": "tiny-llama3"}, {"name": "b", "model": "tiny-qwen2.5"}],
            "grpo": {"k": 2, "max_new_tokens": 4},
            "train": {"max_steps": 1},
        }
    )
    agent = Agent("a", adapter, model, PROBLEMS, AgentSettings.of(cfg), engine=Recording(adapter, model))
    prompts, rollouts = agent.rollout(["a", "b"], seed=0)
    assert calls == ["a", "b"]  # one rendering per problem per step
    assert seen == [prompts]  # the engine got exactly the prompts the update will score
    assert [r.problem_id for r in rollouts] == ["a", "b"]


@pytest.mark.vllm
def test_vllm_generates_from_the_given_rendering_and_checks_its_prompt(monkeypatch):
    from corl_vl.rollout.vllm_engine import VLLMEngine

    monday, tuesday = _days()
    prompts = [monday.encode_prompt(p) for p in PROBLEMS]
    engine = VLLMEngine(tuesday, max_model_len=1024)
    try:
        _no_rendering(tuesday, monkeypatch)
        rollouts = engine.generate(PROBLEMS, prompts=prompts, **GREEDY)
        model = monday.load_model()
        with torch.no_grad():
            lp = monday.completion_logprobs(model, prompts, [r.completions[0].ids for r in rollouts])
        for i, r in enumerate(rollouts):  # vLLM sampled from the very ids the trainer scores
            got = torch.tensor(r.completions[0].logprobs)
            assert torch.allclose(lp.logprobs[i, : len(got)], got, atol=1e-3)
        # a request that would make vLLM build other tokens than the trainer's is refused, not trained on
        mixed = [monday.encode_prompt(p) for p in PROBLEMS]
        mixed[1].request_ids = (
            create_adapter("tiny-llama3", template_date="2026-12-01").encode_prompt(PROBLEMS[1]).request_ids
        )
        with pytest.raises(CorlError, match=r"vLLM built .* prompt tokens for problem b, the trainer scores"):
            engine.generate(PROBLEMS, prompts=mixed, **GREEDY)
    finally:
        engine.close()
