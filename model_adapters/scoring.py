"""The model-facing side of an adapter: batches collated for HF ``generate`` (left-padded) and for the
trainer's forward (prompt + completion, right-padded), and the per-token logprobs (entropy, self-certainty) of
completion tokens — the numbers every GRPO update is made of.

Why a mixin of its own: it is the part of :class:`model_adapters.base.ModelAdapter` that runs the model
forward and touches no prompt rendering; it uses the adapter's ``pad_token_id``, ``placeholder_token_ids``
and ``torch_dtype``; ``collate_mm`` and ``token_type_fields`` here are family hooks.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .logprob_tail import token_logprobs
from .records import CompletionLogprobs, PromptInputs, TrainingBatch
from .vision_sharing import SharedImages, distinct_prompts, feature_index, shared_image_features

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel


class LogprobScoring:
    """Mixed into :class:`~model_adapters.base.ModelAdapter` (see the module docstring).

    One vision pass per problem (:mod:`model_adapters.vision_sharing`): in :meth:`completion_logprobs` rows
    whose prompts carry the same images (a problem's K completions) share one encoding per micro-batch in
    families that give :meth:`image_feature_units`; ``share_vision_pass = False`` on an adapter encodes every
    row's images again (the reference the sharing equals). ``vision_images_encoded`` counts the images the
    tower encoded in these forwards (:meth:`pop_vision_images_encoded`: the ``perf/vision_images_encoded``
    metric).
    """

    share_vision_pass: bool = True
    vision_images_encoded: int = 0
    # family hook: image tensors the forward reads per row besides handing them to the tower (Qwen's
    # ``image_grid_thw``: M-RoPE positions); they stay per row when rows share one encoding
    per_row_mm_inputs: tuple[str, ...] = ()

    def image_feature_units(self, prompt: PromptInputs) -> int | None:
        """Family hook: how many leading entries of ``get_image_features``' output (images, tiles or crops)
        ``prompt``'s image tensors become; None (the default, e.g. a plug-in that has not opted in): the
        family encodes every row's images itself, never shared."""
        return None

    def pop_vision_images_encoded(self) -> int:
        """Images the vision tower encoded in scoring/training forwards since the last call (then reset)."""
        count, self.vision_images_encoded = self.vision_images_encoded, 0
        return count

    def collate_mm(self, prompts: Sequence[PromptInputs]) -> dict[str, torch.Tensor]:
        """Concatenate the prompts' image tensors along dim 0 (images/patches of all rows, in row order)."""
        import torch  # lazy: torch

        keys: list[str] = []
        for p in prompts:
            keys += [k for k in p.mm_inputs if k not in keys]
        return {k: torch.cat([p.mm_inputs[k] for p in prompts if k in p.mm_inputs], dim=0) for k in keys}

    def token_type_fields(self, input_ids: torch.Tensor) -> dict[str, torch.Tensor]:
        """Family hook: per-token fields derived from ids (Qwen2.5-VL ``mm_token_type_ids``, Gemma
        ``token_type_ids``); padding and completion tokens are never image tokens, so deriving is exact."""
        return {}

    def generation_batch(self, prompts: Sequence[PromptInputs]) -> dict[str, torch.Tensor]:
        """Left-padded inputs for HF ``generate`` (``model.generate(**batch, ...)``)."""
        import torch  # lazy: torch

        width = max(len(p) for p in prompts)
        ids = torch.full((len(prompts), width), self.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(prompts), width), dtype=torch.long)
        for i, p in enumerate(prompts):
            ids[i, width - len(p) :] = torch.tensor(p.prompt_ids, dtype=torch.long)
            mask[i, width - len(p) :] = 1
        return {
            "input_ids": ids,
            "attention_mask": mask,
            **self.token_type_fields(ids),
            **self.collate_mm(prompts),
        }

    def training_batch(
        self, prompts: Sequence[PromptInputs], completion_ids: Sequence[Sequence[int]]
    ) -> TrainingBatch:
        """Prompt + completion per row, right-padded, plus the completion mask (see module docstring)."""
        import torch  # lazy: torch

        if len(prompts) != len(completion_ids):
            raise ValueError(f"{len(prompts)} prompts but {len(completion_ids)} completions")
        pad = self.pad_token_id
        # fed back as padding, else the forward miscounts image slots
        banned = set(self.placeholder_token_ids)
        rows = [
            [*p.prompt_ids, *(pad if int(t) in banned else int(t) for t in c)]
            for p, c in zip(prompts, completion_ids)
        ]
        width = max(len(r) for r in rows)
        completion_width = max((len(c) for c in completion_ids), default=0)
        ids = torch.full((len(rows), width), pad, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        comp = torch.full((len(rows), completion_width), pad, dtype=torch.long)
        cmask = torch.zeros((len(rows), completion_width), dtype=torch.bool)
        for i, (row, c) in enumerate(zip(rows, completion_ids)):
            ids[i, : len(row)] = torch.tensor(row, dtype=torch.long)
            mask[i, : len(row)] = 1
            comp[i, : len(c)] = torch.tensor(list(c), dtype=torch.long)
            cmask[i, : len(c)] = True
        mm, shared, encoded = self._image_inputs(prompts)
        inputs = {"input_ids": ids, "attention_mask": mask, **self.token_type_fields(ids), **mm}
        lengths = torch.tensor([len(p) for p in prompts], dtype=torch.long)
        return TrainingBatch(
            inputs=inputs,
            completion_mask=cmask,
            completion_ids=comp,
            prompt_lengths=lengths,
            shared_images=shared,
            images_encoded=encoded,
        )

    def _image_inputs(
        self, prompts: Sequence[PromptInputs]
    ) -> tuple[dict[str, torch.Tensor], SharedImages | None, int]:
        """The batch's image tensors, how rows share their encoding (None: each row encodes its own) and the
        number of images the tower will encode."""
        per_row = sum(len(p.images) or 1 for p in prompts if p.mm_inputs)
        if not self.share_vision_pass or per_row == 0:
            return self.collate_mm(prompts), None, per_row
        firsts, owner = distinct_prompts(prompts)
        units = [self.image_feature_units(prompts[i]) for i in firsts]
        if len(firsts) == len(owner) - owner.count(-1) or any(n is None for n in units):
            return self.collate_mm(prompts), None, per_row
        distinct = [prompts[i] for i in firsts]
        mm = self.collate_mm(distinct)
        keep = [k for k in self.per_row_mm_inputs if k in mm]
        swap = {k: mm.pop(k) for k in keep}
        rows = [
            dataclasses.replace(p, mm_inputs={k: p.mm_inputs[k] for k in keep if k in p.mm_inputs})
            for p in prompts
        ]
        mm.update({k: v for k, v in self.collate_mm(rows).items() if k in keep})
        index = feature_index(owner, [int(n) for n in units if n is not None])
        return mm, SharedImages(swap, index), sum(len(p.images) or 1 for p in distinct)

    # ------------------------------------------------------------------ logprobs
    def completion_logprobs(
        self,
        model: PreTrainedModel,
        prompts: Sequence[PromptInputs],
        completion_ids: Sequence[Sequence[int]],
        *,
        temperature: float = 1.0,
        micro_batch_size: int = 8,
        with_entropy: bool = False,
    ) -> CompletionLogprobs:
        """Logprobs of each completion token under ``softmax(logits / temperature)``, in micro-batches.

        Differentiable (the trainer backprops through it); wrap in ``torch.no_grad()`` for old/ref logprobs.
        Only the completion tokens' hidden states go through the LM head, a chunk at a time (memory bounded by
        the chunk, not by the completion length: :mod:`model_adapters.logprob_tail`).
        """
        import torch  # lazy: torch

        if temperature <= 0:
            raise ValueError("temperature must be > 0 (greedy decoding scores at temperature 1)")
        completion_width = max((len(c) for c in completion_ids), default=0)
        device = next(model.parameters()).device
        lp_parts, ent_parts, sc_parts, mask_parts = [], [], [], []
        for start in range(0, len(prompts), max(1, micro_batch_size)):
            p_chunk = prompts[start : start + micro_batch_size]
            c_chunk = completion_ids[start : start + micro_batch_size]
            batch = self.training_batch(p_chunk, c_chunk)
            lp, ent, sc = self._chunk_logprobs(model, batch, temperature, with_entropy, device)
            pad_to = completion_width - lp.shape[1]
            lp_parts.append(torch.nn.functional.pad(lp, (0, pad_to)))
            mask_parts.append(torch.nn.functional.pad(batch.completion_mask, (0, pad_to)).to(device))
            if with_entropy:
                ent_parts.append(torch.nn.functional.pad(ent, (0, pad_to)))
                sc_parts.append(torch.nn.functional.pad(sc, (0, pad_to)))
        return CompletionLogprobs(
            logprobs=torch.cat(lp_parts),
            mask=torch.cat(mask_parts),
            entropy=torch.cat(ent_parts) if with_entropy else None,
            self_certainty=torch.cat(sc_parts) if with_entropy else None,
        )

    def _chunk_logprobs(
        self, model: Any, batch: TrainingBatch, temperature: float, with_entropy: bool, device: Any
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        import torch  # lazy: torch

        completion_width = batch.completion_ids.shape[1]
        inputs = {k: v.to(device) for k, v in batch.inputs.items()}
        if "pixel_values" in inputs and inputs["pixel_values"].is_floating_point():
            inputs["pixel_values"] = inputs["pixel_values"].to(weights_dtype(model, self.torch_dtype))
        mask = batch.completion_mask.to(device)
        if completion_width == 0:
            empty = torch.zeros((mask.shape[0], 0), device=device)
            return empty, (empty if with_entropy else None), (empty if with_entropy else None)
        # Row i's completion token t is predicted at position prompt_len_i - 1 + t: only positions lo..hi-1 are
        # kept, and the LM head runs on the completion tokens' hidden states in chunks (model_adapters.logprob_tail),
        # so the tail's memory does not grow with the completion length. Masked slots are clamped into range.
        lo = int(batch.prompt_lengths.min()) - 1
        hi = inputs["input_ids"].shape[1] - 1  # the last token of the longest row predicts nothing
        keep = torch.arange(lo, hi, device=device)
        head = model.get_output_embeddings()
        self.vision_images_encoded += batch.images_encoded
        if batch.shared_images is None:
            hidden = _final_hidden_states(model, head, inputs, keep)  # [B, hi-lo, H]
        else:  # one vision pass per distinct prompt (model_adapters.vision_sharing)
            with shared_image_features(model, batch.shared_images) as calls:
                hidden = _final_hidden_states(model, head, inputs, keep)
            if len(calls) != 1:
                raise RuntimeError(
                    f"adapter {self.name}: image features computed {len(calls)} times; expected 1"
                )
        steps = torch.arange(completion_width, device=device)[None, :]
        offsets = ((batch.prompt_lengths.to(device) - 1 - lo)[:, None] + steps).clamp(max=hi - lo - 1)
        hidden = torch.gather(hidden, 1, offsets[:, :, None].expand(-1, -1, hidden.shape[-1]))
        targets = batch.completion_ids.to(device)
        # the HF config (a DeepSpeed engine's own ``config`` is its JSON; the model is its ``module``)
        text_config = getattr(model, "module", model).config.get_text_config()
        picked, entropy, certainty = token_logprobs(
            head,
            hidden[mask],
            targets[mask],
            vocab_size=_vocab_size(head, text_config),
            temperature=temperature,
            softcap=getattr(text_config, "final_logit_softcapping", None),
            with_entropy=with_entropy,
        )

        def spread(values: torch.Tensor) -> torch.Tensor:  # [N] real tokens → [B, Tc], 0 on padding
            return torch.zeros(mask.shape, device=device, dtype=values.dtype).masked_scatter(mask, values)

        return (
            spread(picked),
            None if entropy is None else spread(entropy),
            None if certainty is None else spread(certainty),
        )

    def contain_rollout_logprobs(
        self, rollout_logprobs: torch.Tensor, trainer_logprobs: torch.Tensor, mask: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Guard the importance ratio against non-finite rollout logprobs.

        Returns ``(logprobs, replaced)``: where a masked-in rollout logprob is NaN/inf it is replaced by the
        trainer's value (ratio 1, so the token trains on-policy) and ``replaced`` marks it for logging. Families
        with ``contain_nonfinite_rollout_logprobs = False`` raise instead: there a NaN is a bug to surface.
        """
        import torch  # lazy: torch

        bad = ~torch.isfinite(rollout_logprobs) & mask.bool()
        if bool(bad.any()) and not self.contain_nonfinite_rollout_logprobs:
            raise RuntimeError(
                f"adapter {self.name}: {int(bad.sum())} non-finite rollout logprobs (rollout engine bug?)"
            )
        fixed = torch.where(bad, trainer_logprobs.detach().to(rollout_logprobs.dtype), rollout_logprobs)
        return fixed.masked_fill(~mask.bool(), 0.0), bad


def weights_dtype(model: Any, fallback: torch.dtype) -> torch.dtype:
    """The dtype ``model``'s floating weights are in (images are cast to it); ``fallback`` if it has none."""
    for param in model.parameters():
        if param.is_floating_point():
            return param.dtype
    return fallback


def _final_hidden_states(model: Any, head: Any, inputs: dict[str, Any], keep: torch.Tensor) -> torch.Tensor:
    """The final hidden states at positions ``keep``, exactly as the model hands them to its LM head.

    The model's own forward runs (a DeepSpeed engine must see it), but a pre-hook on the head takes its input
    and passes on zero positions, so the full ``[B, positions, vocab]`` logits are never built.
    """
    captured: list[Any] = []

    def take(_module: Any, args: tuple[Any, ...]) -> tuple[Any, ...]:
        captured.append(args[0])
        return (args[0][:, :0], *args[1:])

    handle = head.register_forward_pre_hook(take)
    try:
        model(**inputs, logits_to_keep=keep, use_cache=False)
    finally:
        handle.remove()
    if len(captured) != 1:
        raise RuntimeError(f"the LM head ran {len(captured)} times in one forward; expected once")
    return captured[0]


def _vocab_size(head: Any, text_config: Any) -> int:
    """Rows of the LM head (its ``out_features``; under ZeRO-3 the weight itself is a shard)."""
    return int(getattr(head, "out_features", None) or text_config.vocab_size)
