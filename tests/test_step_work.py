"""Work a cohort step skips or overlaps: the no-grad scoring pass only when something reads it, no forward for an
agent with nothing to learn, agents' phases in concurrent threads with the same results, a forced length.

Tiny randomly initialised models of the real architectures throughout (model_adapters/tiny.py).
"""

from __future__ import annotations

import copy
import logging

import pytest
import torch
from rigged_models import certain_next_token
from test_update_edges import solo_rollout

from corl_vl.config import config_from_dict
from corl_vl.data.synth import generate_problems, to_text_problem
from corl_vl.errors import CorlError
from corl_vl.rollout.hf import HFEngine
from corl_vl.train.agent import Agent, Batch
from corl_vl.train.cohort import Cohort
from model_adapters.registry import create_adapter


def _cfg(agents=("tiny-qwen2.5",), reward="rent", **sections):
    raw = {
        "agents": [{"name": f"a{i}", "model": m} for i, m in enumerate(agents)],
        "reward": {"topology": "mutual" if len(agents) == 2 else "ring"},
        "data": {"limit": 4, "problems_per_step": 2},
        "grpo": {"k": 4, "max_new_tokens": 6, "micro_batch_size": 3, **sections.pop("grpo", {})},
        "train": {
            "reward": reward,
            "lr": 1e-3,
            "warmup_ratio": 0,
            "plot": False,
            **sections.pop("train", {}),
        },
    }
    return config_from_dict(raw)


@pytest.fixture(scope="module")
def rolled():
    """An agent on a tiny Qwen2.5 text model and one real rollout of it (4 rows of different lengths); tests
    work on copies of the agent (`_twin`), so the module-scoped fixture stays unchanged."""
    agent, rows, comps = solo_rollout(_cfg(grpo={"importance_ratio_cap": 2.0}))
    width = max(len(c.ids) for c in comps)
    lp = torch.zeros(len(comps), width)
    for i, c in enumerate(comps):
        lp[i, : len(c.ids)] = torch.tensor(c.logprobs) - 0.2 * i  # rollout ≠ trainer: ρ ≠ 1, some capped
    return agent, rows, [list(c.ids) for c in comps], lp


def _twin(agent):
    """A second agent with an identical model and optimizer state."""
    return Agent(
        agent.name, agent.adapter, copy.deepcopy(agent.model), list(agent.view.values()), agent.settings
    )


def _update_capturing_grads(agent, batch, old):
    grads = {}
    step = agent.backend.step

    def capture(plan, zero_loss):
        # the fp32 gradients the backend accumulated (it frees each parameter's .grad as it adds it)
        optimizer, names = agent.backend.optimizer, {id(p): n for n, p in agent.model.named_parameters()}
        optimizer.collect_grads()
        grads.update(
            {names[id(w)]: g.clone() for w, g in zip(optimizer.weights, optimizer.grads) if g is not None}
        )
        return step(plan, zero_loss)

    agent.backend.step = capture
    try:
        return agent.update(batch, old=old), grads
    finally:
        del agent.backend.step


@pytest.mark.parametrize("loss_type", ["bnpo", "grpo", "dr_grpo"])
def test_gradient_pass_old_logprobs_give_todays_loss_and_gradients(rolled, loss_type):
    agent, rows, comps, lp = rolled
    spec = type(agent.loss_spec)(**{**agent.loss_spec.__dict__, "loss_type": loss_type})
    batch = Batch(rows, comps, lp, torch.tensor([1.0, -0.5, 0.0, 2.0] * (len(rows) // 4)))
    with_pass, without_pass = _twin(agent), _twin(agent)  # the shared fixture's agent is never changed
    without_pass.loss_spec = with_pass.loss_spec = spec
    m_old, g_old = _update_capturing_grads(with_pass, batch, with_pass.score(rows, comps))
    m_new, g_new = _update_capturing_grads(without_pass, batch, None)

    assert m_old["trained_rows"] == m_new["trained_rows"] > 0
    assert m_new["loss"] == pytest.approx(m_old["loss"], abs=1e-6)
    assert m_new["grad_norm"] == pytest.approx(m_old["grad_norm"], abs=1e-6)
    assert g_old.keys() == g_new.keys() and g_old
    assert max(float((g_old[n] - g_new[n]).abs().max()) for n in g_old) <= 1e-6
    assert m_new["is/truncated_frac"] > 0  # the cap applied in both
    assert "entropy" in m_old and "entropy" not in m_new  # entropy comes from the no-grad pass only


def test_all_zero_advantages_run_no_forward_and_are_logged(rolled, caplog, monkeypatch):
    agent, rows, comps, lp = rolled
    agent = _twin(agent)
    calls = []
    real = agent.adapter.completion_logprobs
    monkeypatch.setattr(
        agent.adapter, "completion_logprobs", lambda *a, **k: calls.append(1) or real(*a, **k)
    )
    before = {n: p.detach().clone() for n, p in agent.model.named_parameters()}
    lr_steps = agent.backend.scheduler.last_epoch
    with caplog.at_level(logging.INFO, logger="corl_vl.train.agent"):
        metrics = agent.update(Batch(rows, comps, lp, torch.zeros(len(rows))))
    assert calls == []
    assert metrics["update/skipped"] == 1.0 and metrics["trained_rows"] == 0.0
    assert "every advantage is 0" in caplog.text and "solo" in caplog.text
    assert all(torch.equal(before[n], p) for n, p in agent.model.named_parameters())
    assert agent.backend.scheduler.last_epoch == lr_steps + 1  # the schedule still moves, as before


def _count_scores(cohort):
    counts = []
    for agent in cohort.agents:
        score = agent.score
        agent.score = lambda *a, _s=score, **k: counts.append(1) or _s(*a, **k)
    return counts


@pytest.mark.parametrize(
    ("reward", "train", "scored"),
    [("rent", {}, True), ("ttrl", {}, False), ("ttrl", {"log_entropy": True}, True)],
)
def test_the_scoring_pass_runs_only_when_something_reads_it(reward, train, scored):
    cohort = Cohort.from_config(_cfg(reward=reward, train={"max_steps": 1, **train}))
    counts = _count_scores(cohort)
    metrics = cohort.step()["a0"]
    assert bool(counts) is scored
    assert ("entropy" in metrics) is scored
    if reward == "ttrl":  # random tiny models never answer: no label, every advantage 0, nothing trained
        assert metrics["update/skipped"] == 1.0


def _params(cohort):
    return {(a.name, n): p.detach().clone() for a in cohort.agents for n, p in a.model.named_parameters()}


def _without_times(metrics):
    return {a: {k: v for k, v in m.items() if not k.startswith("time/")} for a, m in metrics.items()}


def test_parallel_agents_give_bit_identical_results():
    """Three agents (two families, ring; two VLMs share the problems' lazily loaded images), two steps,
    concurrent rollouts and updates vs one after another.

    One intra-op thread per agent in both runs: CPU kernels split their reductions by the thread count, so
    bits can differ between thread counts whether or not the agents overlap."""
    agents = ("tiny-qwen2.5-vl", "tiny-qwen2.5", "tiny-qwen2.5-vl")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        runs = []
        for parallel in (False, True):
            torch.manual_seed(0)
            cfg = _cfg(agents=agents, reward="rent", train={"max_steps": 2, "parallel_agents": parallel})
            cohort = Cohort.from_config(cfg)
            assert cohort.phases.parallel is parallel
            metrics = [_without_times(cohort.step()) for _ in range(2)]
            completions = [[c.ids for r in st.rollouts for c in r.completions] for st in cohort.last]
            runs.append((metrics, completions, _params(cohort)))
    finally:
        torch.set_num_threads(threads)
    (m_seq, c_seq, p_seq), (m_par, c_par, p_par) = runs
    assert c_seq == c_par
    assert m_seq == m_par
    assert p_seq.keys() == p_par.keys()
    assert all(torch.equal(p_seq[k], p_par[k]) for k in p_seq)
    assert torch.get_num_threads() == threads


def _eos_likely(adapter):
    """A tiny model whose every next token is almost surely a stop token (+50 on its logit)."""
    model = adapter.load_model()
    stop = adapter.stop_token_ids[0]

    def boost(module, inputs, output):
        output[..., stop] += 50.0
        return output

    model.get_output_embeddings().register_forward_hook(boost)
    return model


def test_min_new_tokens_forces_the_length_in_the_hf_engine():
    adapter = create_adapter("tiny-qwen2.5")
    engine = HFEngine(adapter, _eos_likely(adapter), batch_size=4)
    problems = [to_text_problem(p) for p in generate_problems(2, seed=1)]
    kwargs = {"k": 2, "temperature": 1.0, "max_new_tokens": 8, "seed": 0}
    free = [c for r in engine.generate(problems, **kwargs) for c in r.completions]
    forced = [c for r in engine.generate(problems, min_new_tokens=5, **kwargs) for c in r.completions]
    assert max(len(c.ids) for c in free) < 5  # the stop token comes at once without the option
    assert all(len(c.ids) >= 5 for c in forced)
    assert all(len(c.logprobs) == len(c.ids) for c in forced)


def test_a_forced_length_is_not_cut_at_a_sampled_image_placeholder_in_the_hf_engine(tmp_path):
    adapter, placeholder = certain_next_token(tmp_path, "tiny-qwen2.5-vl", "placeholder", boost=1.0)
    engine = HFEngine(adapter, adapter.load_model(), batch_size=4)
    problems = generate_problems(2, seed=4)
    kwargs = {"k": 2, "temperature": 1.0, "max_new_tokens": 10, "seed": 3}
    free = [c for r in engine.generate(problems, **kwargs) for c in r.completions]
    forced = [c for r in engine.generate(problems, min_new_tokens=10, **kwargs) for c in r.completions]
    assert [(c.ids, c.finish_reason) for c in free] == [([], "invalid")] * 4  # cut before the placeholder
    assert [len(c.ids) for c in forced] == [10] * 4
    assert all(placeholder not in c.ids for c in forced)


def test_min_new_tokens_is_validated():
    with pytest.raises(CorlError, match=r"grpo\.min_new_tokens"):
        _cfg(grpo={"min_new_tokens": 7, "max_new_tokens": 6})
