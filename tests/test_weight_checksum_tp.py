"""``rollout.weight_checksum`` under tensor parallelism (corl_vl/rollout/weight_checksum.py): a tiny Qwen2.5's
weights split over T ranks as vLLM splits them (q/k/v and gate/up column-parallel with k/v heads replicated
when T exceeds them, o/down row-parallel, the vocabulary padded and split, norms whole on every rank), held by
modules carrying the attributes vLLM's layers carry. The ranks' shares add up to the trainer's checksum; a
rank's plain sum (what every rank compared before) does not."""

from __future__ import annotations

import pytest
import torch

from corl_vl.rollout.vllm_engine import checkpoint_format_weights
from corl_vl.rollout.weight_checksum import engine_share, trainer_checksum, value_sum
from model_adapters.registry import create_adapter


class _Layer(torch.nn.Module):
    """A vLLM layer's parameters and the attributes its TP rules read (``tp_size``, ``tp_rank``, …)."""

    def __init__(self, weight, bias=None, **attrs):
        super().__init__()
        self.weight = torch.nn.Parameter(weight.clone(), requires_grad=False)
        if bias is not None:
            self.bias = torch.nn.Parameter(bias.clone(), requires_grad=False)
        for key, value in attrs.items():
            setattr(self, key, value)


def _rows(t, r, tp):
    return t.chunk(tp, dim=0)[r]


def _qkv(attn, r, tp, heads, kv_heads, head):
    replicas = max(1, tp // kv_heads)
    kv_rank = r // replicas  # vLLM: shard_rank = tp_rank // num_kv_head_replicas
    kv_split = max(1, kv_heads // tp) if tp < kv_heads else 1

    def kv(t):
        return t.reshape(kv_heads, head, *t.shape[1:])[kv_rank * kv_split : (kv_rank + 1) * kv_split].flatten(
            0, 1
        )

    parts = {k: getattr(attn, f"{k}_proj") for k in "qkv"}
    weight = torch.cat([_rows(parts["q"].weight, r, tp), kv(parts["k"].weight), kv(parts["v"].weight)])
    bias = torch.cat([_rows(parts["q"].bias, r, tp), kv(parts["k"].bias), kv(parts["v"].bias)])
    return _Layer(
        weight,
        bias,
        tp_size=tp,
        tp_rank=r,
        num_heads=heads // tp,
        head_size=head,
        num_kv_head_replicas=replicas,
    )


def _row_parallel(linear, r, tp):
    return _Layer(linear.weight.chunk(tp, dim=1)[r], tp_size=tp, tp_rank=r, input_is_parallel=True)


def _vocab(weight, r, tp):
    pad = -weight.shape[0] % (64 * tp)  # vLLM pads the vocabulary; zeros add nothing
    padded = torch.cat([weight, weight.new_zeros(pad, weight.shape[1])])
    return _Layer(_rows(padded, r, tp), tp_size=tp, tp_rank=r)


def _rank_model(model, r, tp):
    """TP rank ``r`` of ``model`` in vLLM's layout."""
    cfg = model.config
    heads, kv_heads, head = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
    out = torch.nn.Module()
    out.embed = _vocab(model.model.embed_tokens.weight, r, tp)
    out.lm_head = _vocab(model.lm_head.weight, r, tp)
    out.norm = _Layer(model.model.norm.weight)  # replicated: plain layers have no tp_size
    out.layers = torch.nn.ModuleList()
    for layer in model.model.layers:
        mlp, block = layer.mlp, torch.nn.Module()
        block.qkv = _qkv(layer.self_attn, r, tp, heads, kv_heads, head)
        block.o = _row_parallel(layer.self_attn.o_proj, r, tp)
        gate_up = torch.cat([_rows(mlp.gate_proj.weight, r, tp), _rows(mlp.up_proj.weight, r, tp)])
        block.gate_up = _Layer(gate_up, tp_size=tp, tp_rank=r)
        block.down = _row_parallel(mlp.down_proj, r, tp)
        block.norm1 = _Layer(layer.input_layernorm.weight)
        block.norm2 = _Layer(layer.post_attention_layernorm.weight)
        out.layers.append(block)
    return out


@pytest.mark.parametrize("tp", [2, 8])  # 8 > the 4 kv heads: each k/v head lives on two ranks
def test_the_shares_of_a_tp_group_add_up_to_the_trainer_checksum(tp):
    adapter = create_adapter("tiny-qwen2.5")
    model = adapter.load_model()
    with torch.no_grad():
        for p in model.parameters():  # norms away from 1.0: a replicated tensor counted twice would show
            p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())) * 0.01)
    want = trainer_checksum(checkpoint_format_weights(model, adapter))
    ranks = [_rank_model(model, r, tp) for r in range(tp)]
    assert sum(engine_share(m, r) for r, m in enumerate(ranks)) == want
    # what a rank compared before: its own shard's plain sum, never the trainer's
    assert all(value_sum(m.parameters()) != want for m in ranks)
    assert engine_share(_rank_model(model, 0, 1), 0) == want  # T = 1: the share is the whole sum


def test_a_weight_missing_on_one_rank_changes_the_total():
    adapter = create_adapter("tiny-qwen2.5")
    model = adapter.load_model()
    want = trainer_checksum(checkpoint_format_weights(model, adapter))
    ranks = [_rank_model(model, r, 2) for r in range(2)]
    with torch.no_grad():
        ranks[1].layers[0].down.weight.zero_()  # a shard the sync did not deliver
    assert sum(engine_share(m, r) for r, m in enumerate(ranks)) != want
