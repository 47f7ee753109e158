"""Micro-batches built by length (``corl_vl.train.minibatches.length_micro_batches``): the loss, the gradient and
the no-grad scores equal today's in-order padded micro-batches for every ``grpo.loss_type`` and policy loss, while
fewer padded tokens are computed (``perf/padding_share``). With an adapter that shares a problem's vision pass,
a problem's rows are kept together: the same loss, fewer pictures encoded (``perf/vision_images_encoded``).

Tiny randomly initialised models of the real architectures (model_adapters/tiny.py); completions are drawn with
very different lengths so the length order really differs from the row order.
"""

from __future__ import annotations

import copy
import random

import pytest
import torch
from test_step_work import _update_capturing_grads

from corl_vl.config import config_from_dict
from corl_vl.data.synth import generate_problems, to_text_problem
from corl_vl.train import minibatches
from corl_vl.train.agent import Agent, AgentSettings, Batch
from model_adapters.registry import create_adapter

K = 4


def _in_order(lengths, rows, size, groups=None):
    """Today's padded path: micro-batches of consecutive rows, whatever their lengths."""
    return [rows[start : start + size] for start in range(0, len(rows), size)]


def _agent(model_name, text, **grpo):
    raw = {
        "agents": [{"name": "solo", "model": model_name}],
        "data": {"limit": 3, "problems_per_step": 3},
        "grpo": {"k": K, "max_new_tokens": 40, "micro_batch_size": 3} | grpo,
        "train": {"reward": "rent", "lr": 1e-3, "warmup_ratio": 0, "plot": False},
    }
    cfg = config_from_dict(raw)
    adapter = create_adapter(model_name)
    torch.manual_seed(0)
    problems = generate_problems(3, seed=4)
    view = [to_text_problem(p) for p in problems] if text else problems
    return Agent("solo", adapter, adapter.load_model().train(), view, AgentSettings.of(cfg)), view


def _batch(agent, view):
    """K rows per problem, completion lengths from 1 to 37 tokens shuffled across groups."""
    rng = random.Random(7)
    prompts = agent.encode([p.id for p in view])
    lengths = [1, 37, 5, 20, 33, 2, 12, 29, 8, 36, 3, 17]
    rng.shuffle(lengths)
    rows = [p for p in prompts for _ in range(K)]
    completions = [[rng.randrange(20, 120) for _ in range(n)] for n in lengths]
    width = max(lengths)
    rollout = torch.zeros(len(rows), width)
    for i, n in enumerate(lengths):
        rollout[i, :n] = -torch.rand(n) * 3  # rollout ≠ trainer: ratios away from 1, some clipped
    advantages = torch.tensor([1.0, -0.5, 0.7, -1.2] * 3)
    return Batch(rows, completions, rollout, advantages)


def _twin(agent):
    return Agent(
        agent.name, agent.adapter, copy.deepcopy(agent.model), list(agent.view.values()), agent.settings
    )


def _compare(agent, batch, spec, monkeypatch):
    bucketed, padded = _twin(agent), _twin(agent)
    bucketed.loss_spec = padded.loss_spec = spec
    m_new, g_new = _update_capturing_grads(bucketed, batch, None)
    with monkeypatch.context() as patch:
        patch.setattr(minibatches, "length_micro_batches", _in_order)
        m_old, g_old = _update_capturing_grads(padded, batch, None)
    assert m_new["trained_rows"] == m_old["trained_rows"] == len(batch.prompts)
    assert m_new["loss"] == pytest.approx(m_old["loss"], rel=1e-5, abs=1e-6)
    assert g_new.keys() == g_old.keys() and g_old
    scale = max(float(g.abs().max()) for g in g_old.values())
    assert scale > 0
    assert max(float((g_new[n] - g_old[n]).abs().max()) for n in g_old) <= 1e-5 * max(scale, 1.0)
    # the same rows, fewer padded tokens (the order really changed)
    assert m_new["perf/padded_tokens"] < m_old["perf/padded_tokens"]
    assert m_new["perf/padding_share"] < m_old["perf/padding_share"]
    assert m_new["perf/update_tokens"] - m_new["perf/padded_tokens"] == (
        m_old["perf/update_tokens"] - m_old["perf/padded_tokens"]
    )


@pytest.fixture(scope="module")
def text_agent():
    return _agent("tiny-qwen2.5", text=True)


@pytest.mark.parametrize("loss_type", ["bnpo", "grpo", "dr_grpo"])
@pytest.mark.parametrize("policy", ["ppo_clip", "gspo", "gmpo", "cispo", "sapo"])
def test_length_micro_batches_give_the_padded_paths_loss_and_gradients(
    text_agent, loss_type, policy, monkeypatch
):
    agent, view = text_agent
    spec = type(agent.loss_spec)(
        **{**agent.loss_spec.__dict__, "loss_type": loss_type, "policy_loss": policy}
    )
    _compare(agent, _batch(agent, view), spec, monkeypatch)


@pytest.mark.parametrize("grouping", ["by_problem", "by_length_only"])
@pytest.mark.parametrize("model_name", ["tiny-qwen2.5-vl", "tiny-gemma3"])
def test_length_micro_batches_are_exact_for_pictures_too(model_name, grouping, monkeypatch):
    """A VLM (M-RoPE positions, pictures per row), with the KL term and the entropy bonus on; a problem's rows
    kept together (the sharing adapters' order) or sorted by length alone."""
    agent, view = _agent(model_name, text=False)
    assert minibatches.sharing_groups(agent.adapter, agent.encode([p.id for p in view])) == [0, 1, 2]
    spec = type(agent.loss_spec)(**{**agent.loss_spec.__dict__, "loss_type": "grpo", "entropy_coef": 0.01})
    if grouping == "by_length_only":
        monkeypatch.setattr(minibatches, "sharing_groups", lambda adapter, prompts: None)
    _compare(agent, _batch(agent, view), spec, monkeypatch)


# Three problems × K = 4, two rows per micro-batch; completion lengths per problem: two long rows 30 apart, two
# short ones. The prompts differ by < 30 tokens (87, 88, 107 for Qwen2.5-VL), so by length alone the rows of the
# three problems interleave: [C300 B300] [A300 C270] [B270 A270] [C150 B150 A150] [C120 B120 A120] (the short
# rows three to a forward: within the token budget of 2 longest rows and 10 % padding) = 2+2+2+3+3 = 12
# pictures; kept together, each problem makes two forwards of its own picture: 3 × 2 = 6 pictures.
SPREAD = [300, 270, 150, 120]


@pytest.mark.parametrize("model_name", ["tiny-qwen2.5-vl", "tiny-gemma3"])
def test_a_sharing_adapter_keeps_a_problems_rows_together(model_name, monkeypatch):
    agent, view = _agent(model_name, text=False, micro_batch_size=2, max_new_tokens=300)
    prompts = agent.encode([p.id for p in view])
    assert max(map(len, prompts)) - min(map(len, prompts)) < 30  # the premise of the counts above
    rng = random.Random(3)
    rows = [p for p in prompts for _ in range(K)]
    completions = [[rng.randrange(20, 120) for _ in range(n)] for _ in prompts for n in SPREAD]
    rollout = torch.zeros(len(rows), max(SPREAD))
    for i, c in enumerate(completions):
        rollout[i, : len(c)] = -torch.rand(len(c)) * 3
    batch = Batch(rows, completions, rollout, torch.tensor([1.0, -0.5, 0.7, -1.2] * 3))
    lengths = minibatches.row_lengths(rows, completions)
    groups = minibatches.sharing_groups(agent.adapter, rows)
    assert groups == [0] * K + [1] * K + [2] * K
    micro = minibatches.length_micro_batches(lengths, list(range(12)), 2, groups)
    assert micro == [[8, 9], [10, 11], [4, 5], [6, 7], [0, 1], [2, 3]]  # C, B, A: by their longest row
    assert minibatches.pictures_encoded(groups, micro) == 6

    together, apart = _twin(agent), _twin(agent)
    agent.adapter.pop_vision_images_encoded()
    m_together, g_together = _update_capturing_grads(together, batch, None)
    assert (
        agent.adapter.pop_vision_images_encoded() == 6
    )  # one picture per problem per forward, 2 forwards each
    with monkeypatch.context() as patch:
        patch.setattr(minibatches, "sharing_groups", lambda adapter, prompts: None)
        m_apart, g_apart = _update_capturing_grads(apart, batch, None)
    assert agent.adapter.pop_vision_images_encoded() == 12  # 2+2+2+3+3: rows of several problems per forward
    assert m_together["loss"] == pytest.approx(m_apart["loss"], rel=1e-5, abs=1e-6)
    scale = max(float(g.abs().max()) for g in g_apart.values())
    assert max(float((g_together[n] - g_apart[n]).abs().max()) for n in g_apart) <= 1e-5 * max(scale, 1.0)
    assert m_together["perf/padding_share"] <= minibatches.PADDING_TARGET


def test_scores_come_back_in_the_callers_order(text_agent, monkeypatch):
    agent, view = text_agent
    batch = _batch(agent, view)
    scored = agent.score(batch.prompts, batch.completions)
    with monkeypatch.context() as patch:
        patch.setattr(minibatches, "length_micro_batches", _in_order)
        today = agent.score(batch.prompts, batch.completions)
    assert torch.equal(scored.mask, today.mask)
    for name in ("logprobs", "entropy", "self_certainty"):
        assert torch.allclose(getattr(scored, name), getattr(today, name), atol=1e-5), name


@pytest.mark.parametrize("model_name", ["tiny-qwen2.5-vl"])
def test_the_no_grad_pass_scores_each_length_micro_batch_in_one_forward(model_name, monkeypatch):
    """The scoring pass runs the update's micro-batches: a problem's 4 short rows fit the token budget of 2
    long rows, so they are one forward and one picture; cut into chunks of ``micro_batch_size`` rows (what
    scoring did before) they were 2 forwards, each encoding the picture again. Same scores either way."""
    agent, view = _agent(model_name, text=False, micro_batch_size=2, max_new_tokens=300)
    prompts = agent.encode([p.id for p in view])
    rng = random.Random(5)
    rows = [p for p in prompts for _ in range(K)]
    spread = [[100, 98, 96, 94], [100, 98, 96, 94], [300, 295, 290, 285]]  # prompts of 87, 88, 107
    completions = [[rng.randrange(20, 120) for _ in range(n)] for lengths in spread for n in lengths]
    groups = minibatches.sharing_groups(agent.adapter, rows)
    micro = minibatches.length_micro_batches(
        minibatches.row_lengths(rows, completions), list(range(12)), 2, groups
    )
    assert micro == [[8, 9], [10, 11], [4, 5, 6, 7], [0, 1, 2, 3]]
    agent.adapter.pop_vision_images_encoded()
    scored = agent.score(rows, completions)
    assert agent.adapter.pop_vision_images_encoded() == 4  # one per forward: 2 for the long problem, 1 each
    with monkeypatch.context() as patch:
        patch.setattr(minibatches, "length_micro_batches", _in_order)  # chunks of 2 rows in row order
        chunked = agent.score(rows, completions)
    assert agent.adapter.pop_vision_images_encoded() == 6
    assert torch.equal(scored.mask, chunked.mask)
    for name in ("logprobs", "entropy", "self_certainty"):
        assert torch.allclose(getattr(scored, name), getattr(chunked, name), atol=1e-5), name


def test_length_order_and_padding_arithmetic():
    lengths = [5, 9, 5, 2, 9, 1]
    micro = minibatches.length_micro_batches(lengths, [0, 1, 2, 3, 4, 5], 2)
    assert micro == [[1, 4], [0, 2], [3], [5]]  # longest first; ties keep the row order
    assert minibatches.padding_tokens(lengths, micro) == (0, 31)  # 2 with 1 would be 50 % padding
    # short rows share a forward up to the token budget of `size` longest rows (2 × 10 here)
    assert minibatches.length_micro_batches([10, 2, 2, 2, 2, 2], list(range(6)), 2) == [[0], [1, 2, 3, 4, 5]]
    # never more padding than the target in any micro-batch, over a long-tailed draw
    draw = [int(30 * 1.5 ** (i % 9)) + i for i in range(64)]
    for mb in minibatches.length_micro_batches(draw, list(range(64)), 8):
        padded, computed = minibatches.padding_tokens(draw, [mb])
        assert padded <= minibatches.PADDING_TARGET * computed
        assert computed <= 8 * max(draw)
    assert minibatches.padding_tokens(lengths, _in_order(lengths, list(range(6)), 2)) == (15, 46)
    merged = minibatches.merge_updates(
        [
            {"lr": 1.0, "update/skipped": 0.0, "perf/padded_tokens": 1.0, "perf/update_tokens": 10.0},
            {"lr": 1.0, "update/skipped": 0.0, "perf/padded_tokens": 9.0, "perf/update_tokens": 90.0},
        ]
    )
    assert merged["perf/padding_share"] == pytest.approx(0.1)


def test_grouped_order_keeps_problems_contiguous_under_the_same_bounds():
    # problem 0: rows 0-2, problem 1: rows 3-5; -1: a row without a picture (a problem of its own)
    lengths = [100, 60, 58, 99, 61, 59, 80]
    groups = [0, 0, 0, 1, 1, 1, -1]
    assert minibatches.bucket_order(lengths, list(range(7)), groups) == [0, 1, 2, 3, 4, 5, 6]
    by_length = minibatches.length_micro_batches(lengths, list(range(7)), 2)
    assert by_length == [[0, 3], [6], [4, 1, 5], [2]]  # 3 × 61 within the budget of 2 × 100, 1.6 % padding
    assert minibatches.pictures_encoded(groups, by_length) == 5
    together = minibatches.length_micro_batches(lengths, list(range(7)), 2, groups)
    assert together == [
        [0],
        [1, 2],
        [3],
        [4, 5],
        [6],
    ]  # a row joins only under the width of the forward's longest
    assert minibatches.pictures_encoded(groups, together) == 4
    for mb in together:
        padded, computed = minibatches.padding_tokens(lengths, [mb])
        assert padded <= minibatches.PADDING_TARGET * computed and computed <= 2 * max(lengths)
