"""HF rollouts drop finished rows from the decode batch (``corl_vl/rollout/hf_pruning.py``): the tokens, finish
reasons and logprobs equal one ``generate`` call's (``prune_finished=False``, what the engine did before), sampled
under the same seed and greedily, for text and VL families, while fewer row-steps are decoded.

Rows stop at different steps through a logits processor that reads only a row's own tokens (so it acts the same
whichever rows share the batch): after ``lo + first new token % 5`` tokens it forces a stop token, or an image
placeholder (a cut, ``invalid``) for some rows. Tiny randomly initialised models of the real architectures.
"""

from __future__ import annotations

import math

import pytest
import torch

from corl_vl.data.synth import generate_problems, to_text_problem
from corl_vl.rollout.hf import HFEngine
from corl_vl.rollout.hf_pruning import can_prune
from model_adapters.registry import create_adapter

TEXT = ("tiny-qwen2.5", "tiny-llama3")
FAMILIES = [*TEXT, "tiny-qwen2.5-vl", "tiny-qwen3-vl", "tiny-internvl3.5", "tiny-gemma3"]


class _StopByContent:
    """Forces a row's end after ``lo + first % 5`` new tokens (``first``: its first new token)."""

    def __init__(self, width: int, stop: int, placeholder: int | None, lo: int) -> None:
        self.width, self.stop, self.placeholder, self.lo = width, stop, placeholder, lo

    def __call__(self, input_ids, scores):
        made = input_ids.shape[1] - self.width
        if made == 0:
            return scores
        first = input_ids[:, self.width]
        due = self.lo + first % 5 <= made
        end = torch.full_like(first, self.stop)
        if self.placeholder is not None:
            end = torch.where(first % 4 == 0, self.placeholder, end)
        scores = scores.clone()
        scores[due] = -math.inf
        scores[due, end[due]] = 0.0
        return scores


def _rigged(name: str, lo: int, placeholders: bool):
    """A tiny model whose ``generate`` ends rows by content, and a list of each decode step's row count."""
    adapter = create_adapter(name)
    torch.manual_seed(0)
    model = adapter.load_model().eval()
    inner, decode_rows = model.generate, []

    def generate(*args, **kwargs):
        processors = kwargs.get("logits_processor")
        if processors is None:  # the shared prompt prefill
            return inner(*args, **kwargs)
        width = kwargs["input_ids"].shape[1] - processors.segment[1]  # the first call's prompt width
        slot = adapter.placeholder_token_ids[0] if placeholders and adapter.placeholder_token_ids else None
        processors.insert(0, _StopByContent(width, adapter.stop_token_ids[0], slot, lo))
        try:
            return inner(*args, **kwargs)
        finally:
            processors.pop(0)

    def count(_module, _args, kwargs):
        ids = kwargs.get("input_ids")
        if ids is not None and ids.shape[1] == 1:
            decode_rows.append(ids.shape[0])

    model.generate = generate
    model.register_forward_pre_hook(count, with_kwargs=True)
    return adapter, model, decode_rows


def _problems(name: str, n: int):
    problems = generate_problems(n, seed=3)
    return [to_text_problem(p) for p in problems] if name in TEXT else problems


def _compare(pruned, plain, problems, decode_rows, **kw):
    """The two engines' completions side by side; the decode row-steps of each."""
    decode_rows.clear()
    got = [c for r in pruned.generate(problems, **kw) for c in r.completions]
    pruned_steps = sum(decode_rows)
    decode_rows.clear()
    want = [c for r in plain.generate(problems, **kw) for c in r.completions]
    assert [c.ids for c in got] == [c.ids for c in want]
    assert [c.finish_reason for c in got] == [c.finish_reason for c in want]
    for g, w in zip(got, want):
        assert torch.allclose(torch.tensor(g.logprobs), torch.tensor(w.logprobs), atol=1e-4)
    return got, pruned_steps, sum(decode_rows)


@pytest.mark.parametrize("name", FAMILIES)
def test_pruned_rows_sample_what_one_call_samples(name):
    adapter, model, decode_rows = _rigged(name, lo=1, placeholders=True)
    assert can_prune(model)
    pruned, plain = HFEngine(adapter, model), HFEngine(adapter, model, prune_finished=False)
    assert pruned.prune_finished and not plain.prune_finished
    problems = _problems(name, 3)
    for temperature in (1.0, 0.0):  # seeded sampling and greedy
        got, pruned_steps, plain_steps = _compare(
            pruned, plain, problems, decode_rows, k=4, temperature=temperature, max_new_tokens=7, seed=1
        )
        if temperature:  # the rows ended at different steps, so one call decoded finished rows
            assert len({len(c.ids) for c in got}) > 1
            assert pruned_steps < plain_steps


@pytest.mark.parametrize("name", ["tiny-qwen2.5", "tiny-qwen2.5-vl"])
def test_min_and_max_new_tokens_and_reasons_unchanged(name):
    """A forced minimum (no stop, no placeholder before it), rows cut by ``max_new_tokens`` ('length')."""
    adapter, model, decode_rows = _rigged(name, lo=3, placeholders=False)
    pruned, plain = HFEngine(adapter, model), HFEngine(adapter, model, prune_finished=False)
    got, pruned_steps, plain_steps = _compare(
        pruned, plain, _problems(name, 2), decode_rows, k=4, temperature=1.0, max_new_tokens=6, seed=0,
        min_new_tokens=3,
    )  # fmt: skip
    assert all(len(c.ids) >= 3 for c in got)
    assert {c.finish_reason for c in got} == {"stop", "length"}
    assert all(len(c.ids) == 6 for c in got if c.finish_reason == "length")
    assert pruned_steps < plain_steps


def test_unshared_prompts_prune_too():
    """Without the shared prefill the first call encodes the pictures per row (M-RoPE deltas for every row)."""
    name = "tiny-qwen2.5-vl"
    adapter, model, decode_rows = _rigged(name, lo=1, placeholders=True)
    pruned = HFEngine(adapter, model, share_prompt=False, batch_size=5)  # 2 × 3 rows: two chunks
    plain = HFEngine(adapter, model, share_prompt=False, prune_finished=False, batch_size=5)
    _, pruned_steps, plain_steps = _compare(
        pruned, plain, _problems(name, 2), decode_rows, k=3, temperature=0.8, max_new_tokens=7, seed=9
    )
    assert pruned_steps < plain_steps


def test_sampler_stream_is_the_shape_alone():
    """Why pruning keeps the draws: one-sample multinomial advances the generator by the matrix's shape and a
    row's draw reads its own uniforms only (the engine keeps a one-hot for finished rows)."""
    probs = torch.softmax(torch.randn(6, 500) * 3, dim=-1)
    other = probs.clone()
    other[[1, 4]] = 0.0
    other[[1, 4], 7] = 1.0
    a, b = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    first, second = torch.multinomial(probs, 1, generator=a), torch.multinomial(other, 1, generator=b)
    keep = [0, 2, 3, 5]
    assert torch.equal(first[keep], second[keep])
    assert torch.equal(a.get_state(), b.get_state())


def test_benchmark_forced_lengths_follow_rows_across_calls():
    """``benchmarks/perf/shapes.force_lengths`` gives each original row its drawn length in the pruned engine
    too (continuation calls are tagged with the rows they carry), as in one call: both vs_trl arms alike."""
    from benchmarks.perf.shapes import draw_length, force_lengths

    lengths = {}
    for prune in (True, False):
        adapter = create_adapter("tiny-qwen2.5")
        torch.manual_seed(0)
        model = adapter.load_model().eval()
        force_lengths(model, list(adapter.stop_token_ids), [], 64)
        engine = HFEngine(adapter, model, prune_finished=prune)
        problems = _problems("tiny-qwen2.5", 1)
        rollout = engine.generate(problems, k=8, temperature=1.0, max_new_tokens=64, seed=2)[0]
        lengths[prune] = [len(c.ids) for c in rollout.completions]
    want = [min(draw_length(0, r) + 1, 64) for r in range(8)]  # the drawn tokens, then the forced stop
    assert lengths[True] == lengths[False] == want
