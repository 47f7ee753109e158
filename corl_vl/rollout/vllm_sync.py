"""The tensors a vLLM weight sync hands the engine's loader: whole, or streamed one at a time under ZeRO-3.

Why stream: under ZeRO-3 each rank holds a partition of every parameter; gathering all of them at once for the
sync costs a second whole copy of the model on the device, on top of the trainer's state and the engine's woken
weights (the largest single cost in ``corl-vl plan`` for a 12B model on 80 GB). Streamed, each parameter is
gathered, handed to vLLM, and released before the next: the sync's extra memory is the largest one tensor (the
embedding), as verl's FSDP sync does it. Why that is right, read from vLLM 0.32 and DeepSpeed 0.19:

- vLLM's ``reload_weights`` passes the iterator to the model's ``load_weights`` (``AutoWeightsLoader``: nested
  generators and ``groupby``), which pulls one pair at a time. Its layer-wise reload keeps a *reference* to each
  pair until every weight of that vLLM layer arrived (q, k and v of a fused qkv), then copies; DeepSpeed releases
  a gathered parameter by replacing ``param.data`` (never resizing its storage), so a held tensor stays valid.
- every rank builds the same order from the same model (the gathers are collectives over the agent's group), and
  the stream is drained after the reload, so no rank skips a gather another one waits in.
- the names are those of the whole path: transformers' ``revert_weight_conversion`` runs once over the whole
  state dict of meta tensors (its renamings are stateful across keys), mapping each output back to its key.

Where one output needs several tensors — a family converter (fused experts) or LoRA merging — the sync gathers
the whole model as before; so do the folder sync (multiprocessing engines) and ``rollout.weight_checksum``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from corl_vl.errors import CorlError
from corl_vl.rollout.weights import engine_state_dict, lora_layers

Gather = Callable[[list[Any]], contextlib.AbstractContextManager[Any]]


def checkpoint_format_weights(model: Any, adapter: Any) -> list[tuple[str, Any]]:
    """``model``'s tensors (LoRA merged) as vLLM's loaders read them: ``save_pretrained``'s names, then the
    adapter's hook."""
    # lazy: PIL, numpy, tokenizers, transformers
    from transformers.core_model_loading import revert_weight_conversion

    from model_adapters.vllm_layout import hooked_weights

    return hooked_weights(
        adapter.vllm_weights, revert_weight_conversion(model, engine_state_dict(model)).items()
    )


def save_weights_on_this_rank(model: Any, adapter: Any, folder: Path) -> None:
    """``save_pretrained`` of model and processor written by this rank (transformers' rank-0 gate lifted), its
    shards then passed through the adapter's vLLM weight hook."""
    # lazy: PIL, numpy, tokenizers
    from model_adapters.vllm_layout import apply_to_folder

    model.should_save_on_this_rank = lambda is_main_process: is_main_process
    try:
        model.save_pretrained(
            folder, safe_serialization=True, is_main_process=True, state_dict=engine_state_dict(model)
        )
    finally:
        del model.should_save_on_this_rank
    adapter.processor.save_pretrained(folder)
    if not (folder / "config.json").exists():
        raise CorlError(f"{folder}: the vLLM sync folder has no config.json after save_pretrained")
    apply_to_folder(folder, adapter.vllm_weights)


def whole_weights(model: Any, gather: Gather | None) -> contextlib.AbstractContextManager[Any]:
    """Every parameter whole for the context (``gather`` None: they are already)."""
    return contextlib.nullcontext() if gather is None else gather(list(model.parameters()))


def _sources(model: Any) -> dict[str, Any]:
    """Each state-dict name's parameter or buffer (tied names share one parameter)."""
    return {
        **dict(model.named_buffers(remove_duplicate=False)),
        **dict(model.named_parameters(remove_duplicate=False)),
    }


def stream_order(model: Any) -> list[tuple[str, str]] | None:
    """(checkpoint-format name, state-dict key) pairs in the whole path's order, or None when some output is not
    one tensor renamed (a converter builds it, LoRA merges it, or a key is neither parameter nor buffer)."""
    # lazy: torch, transformers
    import torch
    from transformers.core_model_loading import revert_weight_conversion

    if lora_layers(model):
        return None
    sources = _sources(model)
    keys = list(model.state_dict().keys())
    if any(key not in sources for key in keys):
        return None
    # ZeRO-3 keeps the full shape in ds_shape (the module's tensor is an empty partition)
    markers = {
        key: torch.empty(
            getattr(sources[key], "ds_shape", sources[key].shape), dtype=sources[key].dtype, device="meta"
        )
        for key in keys
    }
    owner = {id(marker): key for key, marker in markers.items()}
    order = [
        (name, owner.get(id(tensor))) for name, tensor in revert_weight_conversion(model, markers).items()
    ]
    if any(key is None for _, key in order):
        return None
    return order  # type: ignore[return-value]


def streamed_weights(
    model: Any, adapter: Any, gather: Gather, order: list[tuple[str, str]]
) -> Iterator[tuple[str, Any]]:
    """The whole path's (name, tensor) pairs, each parameter gathered only while its pairs are being consumed."""
    # lazy: torch
    import torch

    sources = _sources(model)
    for name, key in order:
        source = sources[key]
        with gather([source] if isinstance(source, torch.nn.Parameter) else []):
            pairs = list(adapter.vllm_weights(name, source.detach()))
            while pairs:  # popped: this frame holds no gathered tensor once the loader has it
                yield pairs.pop(0)


@contextlib.contextmanager
def weights_for_sync(
    model: Any, adapter: Any, gather: Gather | None = None
) -> Iterator[Iterable[tuple[str, Any]]]:
    """The pairs for vLLM's ``reload_weights``: whole when ``gather`` is None (whole weights) or the family needs
    several tensors per output (then all gathered for the context), else streamed (module docstring)."""
    order = None if gather is None else stream_order(model)
    if gather is None or order is None:
        with whole_weights(model, gather):
            yield checkpoint_format_weights(model, adapter)
        return
    stream = streamed_weights(model, adapter, gather, order)
    yield stream
    for _ in stream:  # a loader that stopped early: the other ranks' gathers still pair up
        pass
