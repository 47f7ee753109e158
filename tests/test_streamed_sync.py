"""The vLLM weight sync under ZeRO-3 gathers one parameter at a time (corl_vl/rollout/vllm_sync.py).

The gather is a fake of DeepSpeed ZeRO-3's *rules* on a real tiny model: a partitioned parameter's ``data`` is an
empty tensor (its full shape in ``ds_shape``), a gather puts the whole tensor back, and the release replaces
``data`` by an empty tensor again (``free_param``). It counts how many parameters are whole at once.
"""

from __future__ import annotations

import contextlib

import pytest
import torch

from corl_vl.rollout.vllm_sync import checkpoint_format_weights, stream_order, weights_for_sync
from model_adapters.registry import create_adapter


class FakeZero3:
    """ZeRO-3's partition / gather / release rules for ``model``'s parameters, with a count of whole ones."""

    def __init__(self, model) -> None:
        self.full = {}
        for p in model.parameters():
            self.full[p] = p.data
            p.ds_shape = p.shape
            p.data = torch.empty(0, dtype=p.dtype)
        self.whole = self.most = self.gathers = 0

    @contextlib.contextmanager
    def gather(self, params):
        params = list(dict.fromkeys(params))
        for p in params:
            p.data = self.full[p]
        self.whole += len(params)
        self.most, self.gathers = max(self.most, self.whole), self.gathers + 1
        try:
            yield
        finally:
            for p in params:
                p.data = torch.empty(0, dtype=p.dtype)
            self.whole -= len(params)


def _model(name):
    adapter = create_adapter(name)
    model = adapter.load_model()
    with torch.no_grad():  # weights unlike any file's (as after an update), distinct per parameter
        for i, p in enumerate(model.parameters()):
            p.add_(0.01 * (i + 1))
    return adapter, model


# tiny-qwen2.5: no conversion; tiny-qwen2.5-vl, tiny-gemma3, tiny-internvl3.5: transformers renames (the 12B pair)
@pytest.mark.parametrize("name", ["tiny-qwen2.5", "tiny-qwen2.5-vl", "tiny-gemma3", "tiny-internvl3.5"])
def test_the_stream_gathers_one_parameter_at_a_time_and_yields_the_whole_paths_pairs(name):
    adapter, model = _model(name)
    assert not adapter.zero3_sync_whole  # the memory plan prices the streamed sync for these families
    want = [(n, t.detach().clone()) for n, t in checkpoint_format_weights(model, adapter)]
    zero3 = FakeZero3(model)
    got, whole_while_yielded = [], []
    with weights_for_sync(model, adapter, zero3.gather) as weights:
        for pair in weights:  # held, as vLLM's layer-wise reload holds a fused layer's inputs
            got.append(pair)
            whole_while_yielded.append(zero3.whole)
    assert zero3.most == 1 and max(whole_while_yielded) <= 1  # never more than the one being loaded
    assert zero3.whole == 0 and all(p.numel() == 0 for p in model.parameters())  # all released again
    assert [n for n, _ in got] == [n for n, _ in want]  # names and order
    for (n, g), (_, w) in zip(got, want):  # a held tensor stays valid after its release
        assert g.shape == w.shape and torch.equal(g, w), n


def test_without_a_gather_the_sync_hands_the_whole_list():
    adapter, model = _model("tiny-qwen2.5")
    with weights_for_sync(model, adapter) as weights:
        assert isinstance(weights, list)
        assert [n for n, _ in weights] == [n for n, _ in checkpoint_format_weights(model, adapter)]


def test_a_family_converter_falls_back_to_one_whole_gather():
    # Qwen3-VL-MoE: transformers' expert converter transposes unless the tensor has the module parameter's shape,
    # which under ZeRO-3 is the empty partition's: its output is not provably one tensor renamed
    adapter, model = _model("tiny-qwen3-vl-moe")
    want = [(n, t.detach().clone()) for n, t in checkpoint_format_weights(model, adapter)]
    zero3 = FakeZero3(model)
    assert (
        stream_order(model) is None and adapter.zero3_sync_whole
    )  # and the memory plan prices a whole gather
    with weights_for_sync(model, adapter, zero3.gather) as weights:
        got = [(n, t.clone()) for n, t in weights]
    assert zero3.gathers == 1 and zero3.most == len(zero3.full)
    assert [n for n, _ in got] == [n for n, _ in want]
    assert all(torch.equal(g, w) for (_, g), (_, w) in zip(got, want))


def test_lora_merging_falls_back_to_one_whole_gather():
    from corl_vl.config import LoraConfig
    from corl_vl.train.lora import apply_lora

    adapter, model = _model("tiny-qwen2.5")
    apply_lora(model, adapter, LoraConfig(r=4, alpha=8), agent="qwen")
    assert stream_order(model) is None
    zero3 = FakeZero3(model)
    with weights_for_sync(model, adapter, zero3.gather) as weights:
        names = [n for n, _ in weights]
    assert zero3.gathers == 1 and zero3.most == len(zero3.full)
    assert names and not any("lora" in n for n in names)


def test_tied_embeddings_stream_from_one_parameter_gathered_per_name():
    # Gemma-3's real sizes tie the LM head to the embedding: two state-dict names, one ZeRO-3 parameter
    adapter, model = _model("tiny-qwen2.5")
    model.lm_head.weight = model.model.embed_tokens.weight
    want = [(n, t.detach().clone()) for n, t in checkpoint_format_weights(model, adapter)]
    assert {"lm_head.weight", "model.embed_tokens.weight"} <= {n for n, _ in want}
    zero3 = FakeZero3(model)
    with weights_for_sync(model, adapter, zero3.gather) as weights:
        got = [(n, t.clone()) for n, t in weights]
    assert zero3.most == 1 and zero3.gathers == len(want)  # the shared parameter once for each of its names
    assert [n for n, _ in got] == [n for n, _ in want]
    assert all(torch.equal(g, w) for (_, g), (_, w) in zip(got, want))
