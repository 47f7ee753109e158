"""TurnOffload's host copies (corl_vl/train/offload.py): host buffers allocated once and reused every turn, values
back bit for bit, and the ordering rules of asynchronous copies checked by a strict fake of CUDA's stream rules
(a copy lands only when its stream is synchronised; a source the offload drops must be kept alive until then).
A tiny Qwen2.5 in bf16 trained by the Torch backend's AdamW, whose masters and moments are what moves."""

from __future__ import annotations

import weakref

import pytest
import torch

from corl_vl.train.offload import SyncCopies, TurnOffload
from model_adapters.registry import create_adapter


class _Trained:
    """A bf16 model and an AdamW stepping fp32 master copies of its weights (gradients kept: they move too)."""

    def __init__(self) -> None:
        self.model = create_adapter("tiny-qwen2.5", dtype="bfloat16").load_model()
        masters = [p.detach().float().clone().requires_grad_(True) for p in self.model.parameters()]
        self.optimizer = torch.optim.AdamW(masters, lr=1e-3)
        for i, m in enumerate(masters):
            m.grad = torch.randn(m.shape, generator=torch.Generator().manual_seed(i))
        self.optimizer.step()


def _trained_backend():
    trained = _Trained()
    return trained.model, trained


def _snapshot(offload: TurnOffload) -> list[torch.Tensor]:
    out = [p.detach().clone() for p in offload.own]
    out += [p.grad.clone() for p in offload.own if p.grad is not None]
    out += [v.clone() for _, _, v, _ in offload._state_tensors()]
    return out


class StrictAsyncCopies(SyncCopies):
    """CUDA's rules without CUDA: a copy runs when its stream is synchronised, not when it is queued."""

    def __init__(self) -> None:
        self.pending_host: list[tuple[weakref.ref, torch.Tensor, torch.Tensor]] = []
        self.pending_device: list[tuple[torch.Tensor, torch.Tensor]] = []
        self.kept: list[torch.Tensor] = []
        self.host_ready_calls = 0

    def to_host(self, src, dst):
        # the snapshot a real stream would read; the strong reference is dropped unless keep_alive is called
        self.pending_host.append((weakref.ref(src), src.detach().clone(), dst))
        dst.fill_(float("nan")) if dst.is_floating_point() else dst.fill_(-7)  # not landed yet

    def keep_alive(self, src):
        self.kept.append(src)

    def host_ready(self):
        for ref, values, dst in self.pending_host:
            if ref() is None:
                raise AssertionError("a device tensor was freed while its copy to the host was in flight")
            dst.copy_(values)
        self.pending_host.clear()
        self.kept.clear()  # the copies are done: the memory may be reused now
        self.host_ready_calls += 1

    def to_device(self, src, device):
        out = torch.full_like(src, -7, device=device)  # not landed yet
        self.pending_device.append((src.clone(), out))  # the host buffer as read when the copy runs
        return out

    def device_ready(self):
        for values, out in self.pending_device:
            out.copy_(values)
        self.pending_device.clear()


def test_host_buffers_are_allocated_once_and_reused_every_turn():
    model, trained = _trained_backend()
    offload = TurnOffload(trained.optimizer, model)
    offload.offload()
    allocations = offload.host_allocations
    assert allocations == len(offload.buffers) > 0
    where = {key: buf.data_ptr() for key, buf in offload.buffers.items()}
    first = _snapshot(offload)
    for _ in range(3):
        offload.reload()
        offload.offload()
        assert offload.host_allocations == allocations  # no host allocation after the first offload
        assert {key: buf.data_ptr() for key, buf in offload.buffers.items()} == where
        assert all(p.data_ptr() == where[(id(p), "data")] for p in offload.own)  # the masters live in them
    assert offload.turns == 3
    assert all(torch.equal(a, b) for a, b in zip(first, _snapshot(offload)))  # bit for bit, 3 round trips


def test_values_round_trip_exactly_through_reused_buffers():
    model, trained = _trained_backend()
    offload = TurnOffload(trained.optimizer, model)
    offload.offload()
    offload.reload()
    for _, _, value, _ in offload._state_tensors():
        value.add_(1.0)  # the next turn changes the state: the buffers must carry the new values
    changed = _snapshot(offload)
    offload.offload()
    assert all(torch.equal(a, b) for a, b in zip(changed, _snapshot(offload)))
    offload.reload()
    assert all(torch.equal(a, b) for a, b in zip(changed, _snapshot(offload)))


def test_async_copies_are_waited_for_and_their_sources_kept_alive():
    model, trained = _trained_backend()
    copies = StrictAsyncCopies()
    offload = TurnOffload(trained.optimizer, model, copies=copies)
    before = _snapshot(offload)
    offload.offload()  # the fake raises if a dropped device tensor was not kept alive until host_ready
    assert copies.host_ready_calls == 1 and not copies.pending_host and not copies.kept
    assert all(torch.equal(a, b) for a, b in zip(before, _snapshot(offload)))  # readable once offload returns
    offload.reload()
    assert not copies.pending_device  # the compute stream waits for the copies before reload returns
    assert all(torch.equal(a, b) for a, b in zip(before, _snapshot(offload)))


def test_the_strict_fake_catches_a_source_freed_in_flight():
    class Forgetful(StrictAsyncCopies):
        def keep_alive(self, src):  # what a copy without record_stream (or a held reference) amounts to
            pass

    model, trained = _trained_backend()
    offload = TurnOffload(trained.optimizer, model, copies=Forgetful())
    with pytest.raises(AssertionError, match="freed while its copy"):
        offload.offload()
