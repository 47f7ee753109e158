"""The chunked logprob tail: hand-computed values, equal to the unchunked textbook tail (logprobs and gradients,
fp32), and the LM head never sees more than one chunk of tokens."""

from __future__ import annotations

import math

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from corl_vl.data.problem import Problem
from corl_vl.errors import CorlError
from model_adapters import create_adapter, logprob_tail
from model_adapters.logprob_tail import chunk_tokens, token_logprobs


class _FixedHead(torch.nn.Module):
    """A head whose logits are given rows (the hidden state is the row index)."""

    def __init__(self, rows: list[list[float]]) -> None:
        super().__init__()
        self.table = torch.tensor(rows)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.table[h.long().squeeze(-1)]


def test_worked_example_two_tokens():
    # logits [0, ln 3] → p = [1/4, 3/4]; logits [ln 2, ln 2, 0] padded as V=3 below
    head = _FixedHead([[0.0, math.log(3.0), -1e9], [math.log(2.0), math.log(2.0), 0.0]])
    hidden = torch.tensor([[0.0], [1.0]])
    lp, ent, sc = token_logprobs(head, hidden, torch.tensor([1, 2]), vocab_size=3, with_entropy=True)
    assert lp.tolist() == pytest.approx([math.log(3 / 4), math.log(1 / 5)], abs=1e-6)
    # row 1: p = [2/5, 2/5, 1/5]
    h1 = -(2 * 0.4 * math.log(0.4) + 0.2 * math.log(0.2))
    h0 = -(0.25 * math.log(0.25) + 0.75 * math.log(0.75))
    assert ent.tolist() == pytest.approx([h0, h1], abs=1e-5)
    # self-certainty of row 1: logsumexp(z) - mean z = ln 5 - (2 ln 2)/3
    assert sc[1].item() == pytest.approx(math.log(5.0) - 2 * math.log(2.0) / 3, abs=1e-6)


def test_temperature_divides_the_logits():
    # T = 0.5 doubles the logits: [0, ln 3] → [0, 2 ln 3] → p = [1/10, 9/10]
    head = _FixedHead([[0.0, math.log(3.0)]])
    lp, _, _ = token_logprobs(head, torch.tensor([[0.0]]), torch.tensor([1]), vocab_size=2, temperature=0.5)
    assert lp.item() == pytest.approx(math.log(0.9), abs=1e-6)


def test_chunk_size_from_the_element_budget():
    assert chunk_tokens(151_936, 2**24) == 110
    assert chunk_tokens(262_208, 2**24) == 63
    assert chunk_tokens(10**9, 2**24) == 1  # never zero tokens


def test_chunk_tokens_forced_by_the_environment(monkeypatch):
    monkeypatch.delenv("CORL_VL_LOGPROB_CHUNK_TOKENS", raising=False)
    assert chunk_tokens(151_936) == 110  # the default: the element budget
    monkeypatch.setenv("CORL_VL_LOGPROB_CHUNK_TOKENS", "3")
    assert chunk_tokens(151_936) == 3
    assert chunk_tokens(50, 50 * 4) == 4  # an explicit budget (a caller's) still wins
    for bad in ("0", "-2", "many"):
        monkeypatch.setenv("CORL_VL_LOGPROB_CHUNK_TOKENS", bad)
        with pytest.raises(CorlError, match="CORL_VL_LOGPROB_CHUNK_TOKENS"):
            chunk_tokens(151_936)


def _textbook(head, hidden, targets, temperature, softcap):
    logits = head(hidden)
    if softcap is not None:
        logits = torch.tanh(logits / softcap) * softcap
    logp = torch.log_softmax(logits.float() / temperature, dim=-1)
    return logp.gather(-1, targets[:, None]).squeeze(-1), -(logp.exp() * logp).sum(-1), -logp.mean(-1)


@pytest.mark.parametrize(
    ("temperature", "softcap", "bias", "entropy_in_loss"),
    [(1.0, None, False, False), (0.7, None, False, True), (1.3, 5.0, True, True), (1.0, None, True, False)],
)
def test_chunked_equals_unchunked_with_gradients(temperature, softcap, bias, entropy_in_loss):
    g = torch.Generator().manual_seed(0)
    head = torch.nn.Linear(16, 50, bias=bias)
    with torch.no_grad():
        head.weight.copy_(0.25 * torch.randn(50, 16, generator=g))
        if bias:
            head.bias.copy_(torch.randn(50, generator=g))
    hidden = torch.randn(23, 16, generator=g, requires_grad=True)
    targets = torch.randint(0, 50, (23,), generator=g)
    weights = torch.randn(3, 23, generator=g)

    def grads(fn):
        head.zero_grad(set_to_none=True)
        hidden.grad = None
        lp, ent, sc = fn()
        # an entropy bonus / self-certainty term backpropagates through the other two outputs
        loss = (weights[0] * lp).sum() + (
            (weights[1] * ent).sum() + (weights[2] * sc).sum()
        ) * entropy_in_loss
        loss.backward()
        params = [p.grad.clone() for p in head.parameters()]
        return lp.detach(), ent.detach(), sc.detach(), *params, hidden.grad.clone()

    ref = grads(lambda: _textbook(head, hidden, targets, temperature, softcap))

    def chunked():  # chunks of 4 tokens; 23 is not a multiple of 4
        return token_logprobs(
            head,
            hidden,
            targets,
            vocab_size=50,
            temperature=temperature,
            softcap=softcap,
            with_entropy=True,
            chunk_elements=50 * 4,
        )

    got = grads(chunked)
    for a, b in zip(got[:3], ref[:3], strict=True):  # logprobs, entropy, self-certainty: the same ops per row
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)
    # The gradients come from the closed form (onehot − p, −p(logp + H), p − 1/V) rather than autograd's chain
    # through exp and log_softmax, and sum over tokens chunk by chunk: each fp32 term rounds differently by a
    # few ulps (~1e-7 relative), summed over 23 tokens; a wrong term would be off by the gradient's own size.
    for a, b in zip(got[3:], ref[3:], strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=2e-6)


# ---------------------------------------------------------------------------------------------- real families

FAMILIES = ["tiny-qwen2.5-vl", "tiny-gemma3", "tiny-qwen2.5"]


def _batch(adapter):
    from PIL import Image

    image = Image.new("RGB", (60, 40), (200, 30, 90))
    problems = [
        Problem("a", "What colour is it?", images=[image] if adapter.supports_images else []),
        Problem("b", "Compute 7*6, then add the number of sides of a hexagon."),
    ]
    prompts = [adapter.encode_prompt(p) for p in problems]
    completions = [[5, 9, 13, 21, 8, 3, 17], [11, 4, 6]]
    return prompts, completions


def _textbook_completion_logprobs(adapter, model, prompts, completions, temperature):
    """The unchunked tail: the whole batch's logits, fp32, divided by T, log-softmax, gathered."""
    batch = adapter.training_batch(prompts, completions)
    logits = model(**batch.inputs, use_cache=False).logits
    logp = torch.log_softmax(logits.float() / temperature, dim=-1)
    rows = []
    for i, c in enumerate(completions):
        start = int(batch.prompt_lengths[i]) - 1
        positions = torch.arange(start, start + len(c))
        rows.append(logp[i, positions, torch.tensor(c)])
    out = torch.zeros(len(completions), max(len(c) for c in completions))
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
    return out


@pytest.mark.parametrize("name", FAMILIES)
def test_family_logprobs_and_gradients_equal_the_unchunked_tail(name, monkeypatch):
    adapter = create_adapter(name)
    model = adapter.load_model()
    prompts, completions = _batch(adapter)
    vocab = model.get_output_embeddings().out_features
    monkeypatch.setattr(logprob_tail, "CHUNK_ELEMENTS", 3 * vocab)  # 3 tokens per chunk: several chunks
    weights = torch.randn(2, 7, generator=torch.Generator().manual_seed(1))

    def run(fn):
        model.zero_grad(set_to_none=True)
        lp = fn()
        (weights[:, : lp.shape[1]] * lp).sum().backward()
        return lp.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    ref_lp, ref_grads = run(lambda: _textbook_completion_logprobs(adapter, model, prompts, completions, 0.7))
    got_lp, got_grads = run(
        lambda: adapter.completion_logprobs(model, prompts, completions, temperature=0.7).logprobs
    )
    torch.testing.assert_close(got_lp, ref_lp, rtol=1e-6, atol=1e-6)
    assert got_grads.keys() == ref_grads.keys()
    for key, grad in ref_grads.items():
        # sums over tokens run in another order (chunks): the gap is fp32 rounding, far below 1e-5 of the norm
        assert (got_grads[key] - grad).norm() <= 1e-5 * grad.norm() + 1e-7, key


def test_the_head_never_sees_more_than_one_chunk(monkeypatch):
    adapter = create_adapter("tiny-qwen2.5")
    model = adapter.load_model()
    prompts, completions = _batch(adapter)
    head = model.get_output_embeddings()
    monkeypatch.setattr(logprob_tail, "CHUNK_ELEMENTS", 2 * head.out_features)
    seen: list[int] = []
    handle = head.register_forward_hook(lambda _m, _a, out: seen.append(out.shape[:-1].numel()))
    try:
        out = adapter.completion_logprobs(model, prompts, completions, with_entropy=True)
        out.logprobs.sum().backward()
    finally:
        handle.remove()
    assert max(seen) <= 2  # 10 real completion tokens, 2 per chunk, recomputed in backward
    assert sum(seen) == 2 * 10  # every real token once forward, once in the recompute; no padding slot


class _WeightSizedAllocations(TorchDispatchMode):
    """Counts op outputs with the LM-head weight's shape that are new tensors (not an in-place update)."""

    def __init__(self, shape: torch.Size) -> None:
        super().__init__()
        self.shape, self.count = shape, 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if any(r.alias_info is not None for r in func._schema.returns):  # a view, or written in place
            return out
        for t in out if isinstance(out, tuple | list) else [out]:
            if isinstance(t, torch.Tensor) and t.shape == self.shape:
                self.count += 1
        return out


@pytest.mark.parametrize("with_entropy", [False, True])
def test_the_head_weight_gradient_is_one_buffer_across_chunks(with_entropy):
    # 7 chunks of 4 tokens: autograd would build one weight-sized gradient per chunk and sum them out of place
    # (at a 150 k vocabulary each is 0.6 GB); the tail's backward allocates one and adds every chunk into it.
    g = torch.Generator().manual_seed(0)
    head = torch.nn.Linear(16, 50, bias=False)
    hidden = torch.randn(28, 16, generator=g, requires_grad=True)
    targets = torch.randint(0, 50, (28,), generator=g)
    lp, ent, _ = token_logprobs(
        head, hidden, targets, vocab_size=50, with_entropy=with_entropy, chunk_elements=50 * 4
    )
    loss = lp.sum() + (ent.sum() if with_entropy else 0)
    counter = _WeightSizedAllocations(head.weight.shape)
    with counter:
        loss.backward()
    assert counter.count == 1
    assert head.weight.grad is not None and hidden.grad is not None


@pytest.mark.parametrize(("head_trains", "hidden_trains"), [(False, True), (True, False)])
def test_only_what_trains_gets_a_gradient(head_trains, hidden_trains):
    # a frozen head (LoRA) still passes the gradient to the hidden states, and the other way round
    g = torch.Generator().manual_seed(3)
    head = torch.nn.Linear(16, 50, bias=False).requires_grad_(head_trains)
    hidden = torch.randn(9, 16, generator=g).requires_grad_(hidden_trains)
    targets = torch.randint(0, 50, (9,), generator=g)
    token_logprobs(head, hidden, targets, vocab_size=50, chunk_elements=50 * 4)[0].sum().backward()
    got = head.weight.grad, hidden.grad
    head.weight.grad, hidden.grad = None, None
    _textbook(head, hidden, targets, 1.0, None)[0].sum().backward()
    for a, b in zip(got, (head.weight.grad, hidden.grad), strict=True):
        assert (a is None) == (b is None)
        if b is not None:
            torch.testing.assert_close(a, b, rtol=1e-5, atol=2e-6)
    assert (got[0] is None) != head_trains and (got[1] is None) != hidden_trains
