"""The Torch backend's optimizer: split fp32 masters, fp32 gradient accumulation, fused AdamW, CPU offload."""

from __future__ import annotations

import pytest
import torch

from corl_vl.config import OptimizerConfig, TrainConfig, config_from_dict
from corl_vl.errors import CorlError
from corl_vl.train.backends import TorchBackend
from corl_vl.train.optimizer import combine, resolve_fused, split_fp32
from model_adapters import create_adapter

NO_CLIP = TrainConfig(lr=1e-3, grad_clip=0.0, warmup_ratio=0.0, scheduler="constant")


def _step(backend: TorchBackend) -> float:
    return backend.step(None, zero_loss=lambda: torch.zeros(()))


# ------------------------------------------------------------------------------------------ split masters
def test_split_masters_worked_examples():
    # bf16 keeps 8 significant bits: around 1.0 its spacing is 2^-7, so 1 + 2^-8 is a tie
    x = torch.tensor([1 + 2**-8, 1 + 2**-8 - 2**-23, -(1 + 2**-10), 0.0, -0.0, 2.0**-130])
    hi, lo = split_fp32(x)
    assert hi.dtype == torch.bfloat16 and lo.dtype == torch.int16
    # the tie rounds away from zero; just below it rounds down; the remainder counts fp32 ulps (2^-23 here)
    assert hi.float().tolist()[:3] == [1 + 2**-7, 1.0, -1.0]
    assert lo.tolist()[:3] == [-(2**15), 2**15 - 1, 2**13]
    assert torch.equal(combine(hi, lo).view(torch.int32), x.view(torch.int32))  # bit for bit, ±0 included


def test_split_masters_are_exact_and_nearest():
    torch.manual_seed(0)
    x = torch.randn(100_000) * torch.logspace(-20, 20, 100_000)
    hi, lo = split_fp32(x)
    assert torch.equal(combine(hi, lo).view(torch.int32), x.view(torch.int32))
    nearest = x.to(torch.bfloat16)  # round to nearest even: differs from ours on exact ties only
    differ = hi != nearest
    assert (x.view(torch.int32)[differ] & 0xFFFF).eq(0x8000).all()


# -------------------------------------------------------------------------------- fp32 gradient accumulation
def _scalar_model() -> torch.nn.Linear:
    return torch.nn.Linear(1, 1, bias=False).to(torch.bfloat16)


def _backward_all(model: torch.nn.Module, backward, grads: list[float]) -> None:
    for g in grads:  # d(w · g)/dw = g, exactly representable in bf16
        backward((model.weight * g).sum())


def test_micro_batch_gradients_are_summed_in_fp32():
    # 256 + 1 + … + 1 (16 ones): in bf16 256 + 1 = 257 is a tie between 256 and 258 and rounds (to even) back to
    # 256 every time, so bf16 accumulation ends at 256; fp32 holds 272 exactly
    grads = [256.0] + [1.0] * 16
    plain = _scalar_model()
    _backward_all(plain, lambda loss: loss.backward(), grads)
    assert plain.weight.grad.item() == 256.0  # what autograd's own bf16 accumulation gives
    model = _scalar_model()
    backend = TorchBackend(model, NO_CLIP, lr=1e-3)
    _backward_all(model, backend.backward, grads)
    assert model.weight.grad is None  # the bf16 gradient is freed as soon as it is added
    assert backend.optimizer.grads[0].dtype == torch.float32
    assert backend.optimizer.grads[0].item() == 272.0
    assert _step(backend) == 272.0  # the pre-clip norm is the fp32 sum's


def test_many_micro_batches_train_like_one():
    """17 micro-batches of gradient 256, 1, …, 1 and one of 272 (all exact in bf16 and fp32) give the same fp32
    gradient, so the same AdamW steps, bit for bit. A second step tells them apart otherwise: AdamW's first
    step does not depend on the gradient's scale, its second does (bf16 accumulation would step with 256)."""
    results = []
    for first in ([256.0] + [1.0] * 16, [272.0]):
        torch.manual_seed(0)  # the same initial weight
        model = _scalar_model()
        backend = TorchBackend(model, NO_CLIP, lr=1e-3)
        for grads in (first, [1.0]):
            backend.zero_grad()
            _backward_all(model, backend.backward, grads)
            _step(backend)
        results.append(backend.optimizer.full_master(0).clone())
    assert torch.equal(results[0], results[1])


def test_tiny_model_accumulates_the_fp32_sum_of_its_micro_batches():
    """N micro-batches' accumulated gradient = the sum of each one's gradient, up to fp32 summation error."""
    adapter = create_adapter("tiny-qwen2.5", dtype="bfloat16")
    model = adapter.load_model().train()
    backend = TorchBackend(model, NO_CLIP, lr=1e-3)
    prompts = [adapter.encode_prompt(_problem(i)) for i in range(4)]
    completions = [[11 + i, 12, 13] for i in range(4)]

    def backward(i: int) -> None:
        out = adapter.completion_logprobs(model, [prompts[i]], [completions[i]])
        backend.backward(-out.logprobs.sum())

    alone = []
    for i in range(4):
        backend.zero_grad()
        backward(i)
        alone.append([g.double() for g in backend.optimizer.grads])
    backend.zero_grad()
    for i in range(4):
        backward(i)
    for k, acc in enumerate(backend.optimizer.grads):
        parts = [a[k] for a in alone]
        exact, size = sum(parts), sum(p.abs() for p in parts)
        # recursive fp32 summation of n terms errs by at most (n - 1)·2^-24·Σ|terms| (bf16 would by 2^-9·…)
        assert ((acc.double() - exact).abs() <= 3 * 2**-24 * size).all()


def _problem(i: int):
    from corl_vl.data.problem import Problem

    return Problem(f"p{i}", f"what is {i} plus {i + 1}?")


# ------------------------------------------------------------------------------------------------ offload
def _train_two_steps(offload: str, dtype: str) -> TorchBackend:
    torch.manual_seed(0)
    adapter = create_adapter("tiny-qwen2.5", dtype=dtype)
    model = adapter.load_model().train()
    backend = TorchBackend(model, NO_CLIP, lr=1e-3, optimizer=OptimizerConfig(offload=offload))
    prompts = [adapter.encode_prompt(_problem(i)) for i in range(2)]
    for _ in range(2):
        backend.zero_grad()
        for prompt, ids in zip(prompts, [[11, 12, 13], [14, 15]]):  # two micro-batches
            backend.backward(-adapter.completion_logprobs(model, [prompt], [ids]).logprobs.sum())
        _step(backend)
    return backend


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_cpu_offload_gives_the_same_weights(dtype):
    kept, offloaded = _train_two_steps("none", dtype), _train_two_steps("cpu", dtype)
    assert set(offloaded.optimizer.kinds) == {"copy"}  # a separate fp32 master for every weight
    assert all(m.device.type == "cpu" and m.dtype == torch.float32 for _, m in offloaded.masters)
    for a, b in zip(kept.model.parameters(), offloaded.model.parameters()):
        assert torch.equal(a, b)
    for i in range(len(kept.optimizer.masters)):
        assert torch.equal(kept.optimizer.full_master(i), offloaded.optimizer.full_master(i))


def test_offload_setting_is_checked():
    raw = {"agents": [{"model": "tiny-qwen2.5"}, {"model": "tiny-llama3"}], "optimizer": {"offload": "gpu"}}
    with pytest.raises(CorlError, match=r"optimizer\.offload: must be one of none, cpu"):
        config_from_dict(raw)


# -------------------------------------------------------------------------------------------------- fused
def test_fused_adamw_choice():
    cpu = torch.device("cpu")
    assert resolve_fused(None, cpu) is True  # torch ships a fused CPU AdamW kernel
    assert resolve_fused(False, cpu) is False
    with pytest.raises(CorlError, match=r"optimizer\.fused: true, but torch .* has no fused AdamW for meta"):
        resolve_fused(True, torch.device("meta"))
    model = _scalar_model()
    assert TorchBackend(model, NO_CLIP, lr=1e-3).optimizer.param_groups[0]["fused"] is True
    unfused = TorchBackend(model, NO_CLIP, lr=1e-3, optimizer=OptimizerConfig(fused=False))
    assert unfused.optimizer.param_groups[0]["fused"] is False


def test_fused_and_for_loop_adamw_agree():
    """Both kernels compute the same AdamW formula in fp32: weights agree to a few fp32 rounding steps."""
    results = []
    for fused in (True, False):
        torch.manual_seed(1)
        model = torch.nn.Linear(64, 64).train()
        backend = TorchBackend(model, NO_CLIP, lr=1e-2, optimizer=OptimizerConfig(fused=fused))
        for step in range(3):
            backend.zero_grad()
            backend.backward(model(torch.full((2, 64), float(step + 1))).square().sum())
            _step(backend)
        results.append(model.weight.detach().clone())
    assert torch.allclose(results[0], results[1], rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------------------------------------- checkpoints
def test_an_fp32_master_from_a_checkpoint_loads_into_split_masters():
    model = _scalar_model()
    backend = TorchBackend(model, NO_CLIP, lr=1e-3)
    saved = torch.tensor([[1 + 2**-8 + 2**-20]])  # what a checkpoint with full fp32 masters holds
    backend.optimizer.load_master(0, saved)
    assert torch.equal(backend.optimizer.full_master(0), saved)
    assert model.weight.item() == 1 + 2**-7  # the model's weight is the master rounded
    backend.optimizer.load_master(0, None)  # no masters saved: restart from the weight
    assert backend.optimizer.full_master(0).item() == 1 + 2**-7


def test_offload_in_a_launch_is_the_torch_backends_alone_and_deepspeeds_with_a_file():
    """optimizer.offload under DeepSpeed is its offload_optimizer (tests/test_deepspeed_stages.py)."""
    from types import SimpleNamespace

    from corl_vl.train.backends import launch_backend
    from corl_vl.train.preflight import check_launch

    agents = [{"model": "tiny-qwen2.5"}, {"model": "tiny-llama3"}]
    cfg = config_from_dict({"agents": agents, "optimizer": {"offload": "cpu"}})
    backend = TorchBackend(_scalar_model(), NO_CLIP, lr=1e-3)
    launch = SimpleNamespace(group_size=2, mpu=None, dp_group=None)
    with pytest.raises(
        CorlError, match=r"distributed\.deepspeed: an agent on 2 ranks needs a DeepSpeed config"
    ):
        check_launch(cfg, launch)  # the launch's check, before any model loads (train/launch_support.py)
    alone = SimpleNamespace(group_size=1, mpu=None, dp_group=None)  # one process per agent, no DeepSpeed file
    check_launch(cfg, alone)
    # the Torch backend, its offload included
    assert launch_backend(backend, cfg.distributed, alone, cfg.train, cfg.optimizer) is backend
