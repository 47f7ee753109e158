"""Gradients sum in fp32 wherever the trainer sums them: across the logprob tail's chunks (a bf16 head's weight
and bias gradient), across micro-batches in the Torch backend, and in DeepSpeed (``grad_accum_dtype``).

The crafted head: zero weights over a vocabulary of 2, so every token's logit gradient is exactly (½, −½) and a
chunk of one token adds ½·h to the weight gradient and ½ to the bias gradient — exact in bf16. Summed in bf16 the
running total swamps each new ½ once it reaches 128 (ulp 1: 128 + ½ rounds back to 128); 512 tokens sum to 256."""

from __future__ import annotations

import json
import math

import pytest
import torch

from corl_vl.config import TrainConfig
from corl_vl.errors import CorlError
from corl_vl.train.backends import TorchBackend
from corl_vl.train.deepspeed_setup import deepspeed_config
from model_adapters.logprob_tail import token_logprobs

N, H, V = 512, 4, 2
BF16_EPS = torch.finfo(torch.bfloat16).eps  # 2**-7: one ulp of a value in [1, 2)


def _ulps(x: torch.Tensor) -> torch.Tensor:
    """One bf16 ulp of each value of ``x`` (its binade's spacing)."""
    return BF16_EPS * torch.exp2(torch.floor(torch.log2(x.abs().double())))


def _inputs() -> tuple[torch.nn.Linear, torch.Tensor, torch.Tensor]:
    head = torch.nn.Linear(H, V, bias=True).to(torch.bfloat16)
    torch.nn.init.zeros_(head.weight)
    torch.nn.init.zeros_(head.bias)
    g = torch.Generator().manual_seed(0)
    hidden = (1 + torch.rand(N, H, generator=g)).to(torch.bfloat16)  # in [1, 2]: same-sign products
    return head, hidden, torch.zeros(N, dtype=torch.long)


def _reference(hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The exact gradients (fp64) of Σ logprob: row 0 gets +½ h per token, row 1 −½ h."""
    half = 0.5 * hidden.double().sum(0)
    return torch.stack([half, -half]), torch.tensor([0.5 * N, -0.5 * N], dtype=torch.float64)


def _bound(ref: torch.Tensor) -> torch.Tensor:
    # the chunks' products are exact here; fp32 summing of 512 terms adds < 512·2⁻²⁴ relative, and the one cast
    # to bf16 at the end ≤ ½ ulp: 2 ulps is a bound with room, far below what bf16 summing loses (tens of ulps)
    return 2 * _ulps(ref)


def test_old_bf16_summation_would_exceed_the_bound():
    # what the tail did before: each chunk's product added into a bf16 buffer
    _, hidden, _ = _inputs()
    ref_w, _ = _reference(hidden)
    acc_w, acc_b = torch.zeros(V, H, dtype=torch.bfloat16), torch.zeros(V, dtype=torch.bfloat16)
    for t in range(N):
        acc_w.addmm_(torch.tensor([[0.5], [-0.5]], dtype=torch.bfloat16), hidden[t : t + 1])
        acc_b.add_(torch.tensor([0.5, -0.5], dtype=torch.bfloat16))
    assert acc_b.tolist() == [128.0, -128.0]  # stuck: 128 + ½ rounds to 128
    assert bool(((acc_w.double() - ref_w).abs() > _bound(ref_w)).all())


def test_a_bf16_head_sums_its_gradient_over_many_chunks_in_fp32():
    head, hidden, targets = _inputs()
    lp, _, _ = token_logprobs(head, hidden, targets, vocab_size=V, chunk_elements=V)  # 1 token per chunk
    lp.sum().backward()
    ref_w, ref_b = _reference(hidden)
    assert head.weight.grad.dtype == torch.bfloat16  # the parameter's dtype, rounded once
    assert head.bias.grad.tolist() == [256.0, -256.0]
    assert bool(((head.weight.grad.double() - ref_w).abs() <= _bound(ref_w)).all())
    assert bool(((head.bias.grad.double() - ref_b).abs() <= _bound(ref_b)).all())


@pytest.mark.parametrize("micro_batches", [1, 8])
def test_the_torch_backend_gets_the_same_gradient_however_tokens_split(micro_batches):
    # the Torch backend sums micro-batches in fp32 (MasterAdamW); the tail now sums chunks in fp32 too, so
    # 1 micro-batch of 512 one-token chunks and 8 micro-batches of 64 give the same gradient within the bound
    head, hidden, targets = _inputs()
    backend = TorchBackend(head, TrainConfig(), lr=1e-3)
    size = N // micro_batches
    for start in range(0, N, size):
        rows = slice(start, start + size)
        lp, _, _ = token_logprobs(head, hidden[rows], targets[rows], vocab_size=V, chunk_elements=V)
        backend.backward(lp.sum())
    grad_w, grad_b = backend.optimizer.collect_grads()  # fp32, summed over the micro-batches
    ref_w, ref_b = _reference(hidden)
    assert bool(((grad_w.double() - ref_w).abs() <= _bound(ref_w)).all())
    assert bool(((grad_b.double() - ref_b).abs() <= _bound(ref_b)).all())


# ---------------------------------------------------------------------------------------------- DeepSpeed


def _config(tmp_path, extra: dict) -> dict:
    path = tmp_path / "ds.json"
    path.write_text(json.dumps({"zero_optimization": {"stage": 3}, "bf16": {"enabled": "auto"}, **extra}))
    return deepspeed_config(str(path), zero_stage=None, grad_clip=1.0, group_size=2, dtype="bfloat16")


@pytest.mark.parametrize("given", [None, "auto", "fp32", "float32"])
def test_deepspeed_config_sums_gradients_in_fp32(tmp_path, given):
    extra = {} if given is None else {"data_types": {"grad_accum_dtype": given}}
    ds = _config(tmp_path, extra)
    assert ds["data_types"]["grad_accum_dtype"] == "fp32"
    assert ds["bf16"]["enabled"] is True


@pytest.mark.parametrize("given", ["bf16", "fp16"])
def test_deepspeed_config_refuses_another_grad_accum_dtype(tmp_path, given):
    with pytest.raises(CorlError, match=r"data_types\.grad_accum_dtype' is set by corl-vl") as err:
        _config(tmp_path, {"data_types": {"grad_accum_dtype": given}})
    assert "\n" not in str(err.value)


def test_deepspeed_config_lets_an_offloaded_zero_step_the_agents_torch_adamw(tmp_path):
    offload = {"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}}
    assert _config(tmp_path, offload)["zero_force_ds_cpu_optimizer"] is False  # else DeepSpeed raises at init
    assert "zero_force_ds_cpu_optimizer" not in _config(
        tmp_path, {}
    )  # nothing offloaded: DeepSpeed's default
    with pytest.raises(CorlError, match="'zero_force_ds_cpu_optimizer' is set by corl-vl"):
        _config(tmp_path, {**offload, "zero_force_ds_cpu_optimizer": True})


def test_deepspeed_reads_the_key_as_fp32():
    # DeepSpeed 0.19.8 resolves the string through DtypeEnum (runtime/config.py): the value we write is its fp32
    from deepspeed.runtime.config import DtypeEnum

    assert DtypeEnum("fp32").value == torch.float32
    assert math.isclose(BF16_EPS, 2**-7)
