"""One vision pass per problem: the K rows of a GRPO group carry the same prompt and picture, so a micro-batch
encodes each distinct prompt's images once and hands every row its own copy of the features.

How, without touching the model's forward: the batch carries the per-row tensors the forward needs for
positions (Qwen's ``image_grid_thw`` for M-RoPE) and the tower's inputs (``pixel_values``) of the distinct
prompts only. For the duration of the forward, the model's ``get_image_features`` (the one method every HF VLM
routes pixels through) is replaced on the instance by a wrapper that encodes the distinct prompts' images and
returns the features expanded to every row's order with an index inside the autograd graph, so each row's
placeholder tokens receive exactly the features a per-row encoding would give, and the tower's gradient is the
sum over the rows, as if each row had encoded its picture.

A family opts in with :meth:`~model_adapters.scoring.LogprobScoring.image_feature_units` (how many leading
entries of the features one prompt contributes); the default (``None``) keeps per-row encoding.

The sharing is per forward, so the trainer keeps a problem's rows in forwards of their own when it builds
micro-batches by length (``corl_vl.train.minibatches.sharing_groups``): otherwise rows of similar length from
several problems would share forwards and each picture be encoded in several of them.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

    from .records import PromptInputs


@dataclass(frozen=True)
class SharedImages:
    """How a micro-batch's rows share image features.

    Attributes:
        swap: the distinct prompts' collation of the image tensors the forward receives per row (the family's
            ``per_row_mm_inputs``, e.g. Qwen's ``image_grid_thw``, which positions are built from); the
            wrapped ``get_image_features`` gets these in place of the per-row ones of the same name. Every
            other image tensor (``pixel_values``) reaches the forward collated per distinct prompt already.
        index: ``[row feature units]`` long: for each feature entry a per-row encoding would produce, in row
            order, the entry of the distinct prompts' features it equals.
    """

    swap: dict[str, Any]
    index: Any


def distinct_prompts(prompts: Sequence[PromptInputs]) -> tuple[list[int], list[int]]:
    """``(firsts, owner)``: the first row of each distinct image set (rows with images only) and, per row, the
    position in ``firsts`` of the row whose images it repeats (-1 without images). Rows of one problem share
    the very tensors (one encoding per problem); equal tensors of separate encodings count as the same too."""
    import torch  # lazy: torch

    firsts: list[int] = []
    owner: list[int] = []
    for i, p in enumerate(prompts):
        if not p.mm_inputs:
            owner.append(-1)
            continue
        for j, first in enumerate(firsts):
            q = prompts[first].mm_inputs
            if q.keys() == p.mm_inputs.keys() and all(
                q[k] is v or (q[k].shape == v.shape and q[k].dtype == v.dtype and torch.equal(q[k], v))
                for k, v in p.mm_inputs.items()
            ):
                owner.append(j)
                break
        else:
            owner.append(len(firsts))
            firsts.append(i)
    return firsts, owner


def feature_index(owner: Sequence[int], units: Sequence[int]) -> torch.Tensor:
    """Per row feature entry (rows in order, each row's ``units[owner]`` entries), its entry among the distinct
    prompts' features (distinct prompt ``j``'s entries start after those of prompts ``< j``)."""
    import torch  # lazy: torch

    starts = [0]
    for n in units:
        starts.append(starts[-1] + n)
    picks = [starts[j] + u for j in owner if j >= 0 for u in range(units[j])]
    return torch.tensor(picks, dtype=torch.long)


def expand(value: Any, index: torch.Tensor) -> Any:
    """``value`` with its leading entries picked by ``index``: a tensor along dim 0 (``index_select``, so the
    backward sums the rows' gradients), a tuple/list of per-entry tensors entry by entry, a list of those
    (Qwen3-VL's DeepStack features, one per layer) each in turn; anything else unchanged."""
    import torch  # lazy: torch

    if isinstance(value, torch.Tensor):
        return value.index_select(0, index.to(value.device))
    if isinstance(value, (tuple, list)) and value and isinstance(value[0], (tuple, list)):
        return type(value)(expand(v, index) for v in value)
    if isinstance(value, (tuple, list)) and value and isinstance(value[0], torch.Tensor):
        return tuple(value[int(i)] for i in index)
    return value


def expand_image_features(output: Any, index: torch.Tensor) -> Any:
    """The ``get_image_features`` output of the distinct prompts, turned into a per-row encoding's: the
    features merged into the text (``pooler_output``) and Qwen3-VL's ``deepstack_features``. Hidden states
    of the tower itself are not read by the forward and stay per distinct prompt."""
    for name in ("pooler_output", "deepstack_features"):
        value = getattr(output, name, None)
        if value is not None:
            setattr(output, name, expand(value, index))
    return output


def features_module(model: Any) -> Any:
    """The module whose forward calls ``self.get_image_features``: the innermost one whose class defines it
    (the composite base model under its ``…ForConditionalGeneration``, a DeepSpeed engine or a PEFT wrapper)."""
    found = [m for m in model.modules() if callable(getattr(type(m), "get_image_features", None))]
    if not found:
        raise RuntimeError(f"{type(model).__name__}: no module defines get_image_features to share features")
    return found[-1]


@contextlib.contextmanager
def shared_image_features(model: Any, shared: SharedImages) -> Iterator[list[int]]:
    """While active, ``get_image_features`` of ``model`` encodes the distinct prompts' images and returns the
    features in per-row order; yields a list with each call's number of per-row feature entries (a forward with
    images that never called it would have bypassed the sharing: the caller checks)."""
    module = features_module(model)
    original = module.get_image_features  # the bound method (decorators included)
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    names = [n for n, p in inspect.signature(original).parameters.items() if p.kind in positional]
    calls: list[int] = []

    def per_problem(*args: Any, **kwargs: Any) -> Any:
        if len(args) > len(names):
            raise RuntimeError("get_image_features got more positional arguments than it declares")
        kwargs.update(zip(names, args))
        for name, value in shared.swap.items():  # the per-row tensors the forward also reads, per problem
            near = kwargs.get(name, kwargs.get("pixel_values"))
            kwargs[name] = value.to(near.device) if near is not None else value
        calls.append(len(shared.index))
        return expand_image_features(original(**kwargs), shared.index)

    module.get_image_features = per_problem
    try:
        yield calls
    finally:
        del module.get_image_features  # the class's method again
