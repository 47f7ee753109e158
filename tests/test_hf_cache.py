"""The HF engine's KV cache appends into spare room (``corl_vl/rollout/hf_cache.py``): it holds exactly what HF's
``DynamicLayer`` holds after every update, crop and row selection, reallocates a few times instead of at every
token, and the engine samples the same tokens with it as without it, for text and VL families."""

from __future__ import annotations

import pytest
import torch
from test_rollout_pruning import FAMILIES, _compare, _problems, _rigged
from transformers.cache_utils import DynamicLayer

from corl_vl.rollout.hf import HFEngine
from corl_vl.rollout.hf_cache import GrowingLayer


def _same(growing: GrowingLayer, plain: DynamicLayer) -> None:
    assert torch.equal(growing.keys, plain.keys) and torch.equal(growing.values, plain.values)
    assert growing.get_seq_length() == plain.get_seq_length()


def test_growing_layer_holds_what_the_dynamic_layer_holds():
    torch.manual_seed(0)
    growing, plain = GrowingLayer(), DynamicLayer()
    buffers = set()

    def step(tokens: int, rows: int = 3) -> None:
        k, v = torch.randn(rows, 2, tokens, 8), torch.randn(rows, 2, tokens, 8)
        got, want = growing.update(k, v), plain.update(k, v)
        assert all(torch.equal(g, w) for g, w in zip(got, want))
        _same(growing, plain)
        buffers.add(growing._buffers[0].data_ptr())

    step(10)  # the prompt
    for _ in range(200):  # decode steps
        step(1)
    assert len(buffers) <= 5  # room grows by half: a few reallocations, not one per token (HF's cat: 201)
    for layer in (growing, plain):
        layer.crop(-3)  # generate's rollback of a step: the next update overwrites the dropped tokens
    _same(growing, plain)
    step(1)
    keep = torch.tensor([2, 0])
    for layer in (growing, plain):
        layer.batch_select_indices(keep)  # finished rows leave: new tensors, the next update starts a buffer
    _same(growing, plain)
    for _ in range(5):
        step(1, rows=2)
    for layer in (growing, plain):
        layer.batch_repeat_interleave(2)
    step(1, rows=4)


@pytest.mark.parametrize("name", FAMILIES)
def test_the_engine_samples_the_same_tokens_with_the_growing_cache(name):
    """Against the engine with HF's own cache and one ``generate`` call (what it did before both changes)."""
    adapter, model, decode_rows = _rigged(name, lo=1, placeholders=True)
    growing = HFEngine(adapter, model)
    plain = HFEngine(adapter, model, prune_finished=False, grow_cache=False)
    assert growing.grow_cache and not plain.grow_cache
    for temperature in (1.0, 0.0):
        _compare(
            growing,
            plain,
            _problems(name, 3),
            decode_rows,
            k=4,
            temperature=temperature,
            max_new_tokens=9,
            seed=5,
        )
