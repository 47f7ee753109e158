"""Rollouts with Hugging Face ``generate`` (any device; the trainer's own model object by default).

Processed logprobs without holding every step's scores: temperature and top-p are applied by our own
processors (HF's defaults and the checkpoint's ``generation_config`` — e.g. a hub ``top_k``/
``repetition_penalty`` — are switched off), and a last processor records each step's log-softmax only until
the next step reveals which token was sampled. Memory stays O(rows × vocab) instead of O(steps × rows × vocab).

Finished rows leave the decode batch (``hf_pruning``): ``generate`` runs in segments over a KV cache pruned to
the unfinished rows, with the same sampled tokens as one call.

Determinism: the last processor draws each token from a ``torch.Generator`` seeded per call and ``generate``
then picks it greedily, so a rollout depends only on (weights, prompts, seed), the global RNG is never touched
and agents may generate in concurrent threads (``train.parallel_agents``) with the same results.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Sequence
from typing import Any

import torch
from transformers import GenerationConfig, LogitsProcessor, LogitsProcessorList
from transformers.generation.logits_process import TemperatureLogitsWarper, TopPLogitsWarper

from corl_vl.data.problem import Problem
from corl_vl.errors import CorlError
from corl_vl.rollout.base import Completion, Rollout, cut_at_stop
from corl_vl.rollout.hf_cache import growing_cache
from corl_vl.rollout.hf_pruning import can_prune, segmented_generate
from corl_vl.rollout.sizing import stream_seed
from corl_vl.rollout.weights import engine_state_dict
from model_adapters.scoring import weights_dtype


class NonFiniteLogits(CorlError):
    """The model's next-token scores are NaN/inf: nothing can be sampled (the trainer names the agent)."""


class _LogprobRecorder(LogitsProcessor):
    """Last processor: remembers log-softmax of the final scores; gathers the sampled token one step later.

    It also stops the call when a row's scores are NaN/inf (a NaN log-softmax): sampling from them would end
    in torch's "probability tensor contains inf/nan", and greedy decoding would silently pick token 0."""

    def __init__(self) -> None:
        self.pending: torch.Tensor | None = None
        self.steps: list[torch.Tensor] = []

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if self.pending is not None:
            self._take(input_ids[:, -1])
        self.pending = torch.log_softmax(scores.float(), dim=-1)
        if torch.isnan(self.pending).any():  # -inf entries are masked tokens; NaN means no usable score
            raise NonFiniteLogits(
                f"the model's next-token scores are NaN/inf at new token {len(self.steps) + 1}, so nothing can "
                "be sampled"
            )
        return scores

    def _take(self, tokens: torch.Tensor) -> None:
        assert self.pending is not None
        self.steps.append(self.pending.gather(-1, tokens[:, None]).squeeze(-1))
        self.pending = None

    def reset(self) -> None:
        """Forget the last call's steps (the next ``generate`` call of a segmented rollout starts afresh)."""
        self.pending, self.steps = None, []

    def finish(self, generated: torch.Tensor) -> torch.Tensor:
        """``[rows, steps]`` logprobs of ``generated`` (the completion columns of ``sequences``)."""
        if self.pending is not None and len(self.steps) < generated.shape[1]:
            self._take(generated[:, len(self.steps)])
        if not self.steps:
            return torch.zeros(generated.shape[0], 0)
        return torch.stack(self.steps[: generated.shape[1]], dim=1).cpu()


class _SeededSampler(LogitsProcessor):
    """Samples the next token from ``softmax(scores)`` with its own generator and leaves only that token
    possible: ``generate`` runs greedy, so no draw comes from the global RNG (which threads would share).

    ``rows``: when finished rows have left the batch (``hf_pruning``), the current rows' indices among the
    call's ``total`` rows. The draw is still over all of them (the others a one-hot): torch's one-sample
    ``multinomial`` is ``argmax(p / q)`` with ``q`` exponentials filling ``p``'s shape, so the generator
    advances by the shape alone and each row's draw reads only its own ``q`` — the unpruned draws exactly."""

    def __init__(self, generator: torch.Generator, total: int) -> None:
        self.generator = generator
        self.total = total
        self.rows: torch.Tensor | None = None

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        probs = torch.softmax(scores.float(), dim=-1)
        if self.rows is not None:
            full = probs.new_zeros(self.total, probs.shape[1])
            full[:, 0] = 1.0
            full[self.rows.to(probs.device)] = probs
            probs = full
        tokens = torch.multinomial(probs, 1, generator=self.generator)
        if self.rows is not None:
            tokens = tokens[self.rows.to(tokens.device)]
        chosen = torch.full_like(scores, -math.inf)
        return chosen.scatter_(-1, tokens, 0.0)


@contextlib.contextmanager
def _neutral_generation_config(model: Any, stop_ids: list[int], pad_id: int) -> Iterator[None]:
    """Hide the checkpoint's generation defaults (top_k, repetition penalty …) for the duration of a call."""
    saved = model.generation_config
    model.generation_config = GenerationConfig(eos_token_id=stop_ids, pad_token_id=pad_id)
    try:
        yield
    finally:
        model.generation_config = saved


class HFEngine:
    """:class:`~corl_vl.rollout.base.RolloutEngine` over ``model.generate``.

    By default it samples from the very model object the trainer updates, so :meth:`sync_weights` has nothing
    to copy; give it a separate inference copy (another device or dtype) and sync copies the weights over.
    """

    thread_safe = True  # agents may generate concurrently (train.parallel_agents): no global RNG or state
    # generates from the module it was given (the trainer's): under ZeRO-3 the caller gathers its weights
    reads_trainer_weights = True

    def __init__(
        self,
        adapter: Any,
        model: Any,
        *,
        batch_size: int = 16,
        share_prompt: bool = True,
        prune_finished: bool = True,
        grow_cache: bool = True,
    ) -> None:
        self.adapter = adapter
        self.model = model
        self.batch_size = max(1, batch_size)  # completions (rows) per generate call
        # a problem's K rows of a call share one prefill of its prompt and picture (_shared_prefix)
        self.share_prompt = share_prompt
        # HF's cache for the model is plain dynamic layers: its rows can drop, its layers can grow
        plain = can_prune(model)
        # finished rows leave the decode batch (hf_pruning)
        self.prune_finished = prune_finished and plain
        # the KV cache appends into spare room instead of copying itself every token (hf_cache)
        self.grow_cache = grow_cache and plain

    def generate(
        self,
        problems: Sequence[Problem],
        *,
        k: int,
        temperature: float,
        top_p: float = 1.0,
        max_new_tokens: int,
        seed: int,
        prompts: Sequence[Any] | None = None,
        min_new_tokens: int = 0,
        seed_stream: tuple[int, int] = (0, 1),
    ) -> list[Rollout]:
        if prompts is None:
            prompts = [self.adapter.encode_prompt(p) for p in problems]
        rows = [prompt for prompt in prompts for _ in range(k)]  # each prompt repeated K times, K rows each
        completions: list[Completion] = []
        for chunk_index, start in enumerate(range(0, len(rows), self.batch_size)):
            chunk = rows[start : start + self.batch_size]
            completions += self._generate_rows(
                chunk,
                temperature=temperature,
                top_p=top_p,
                max_new_tokens=max_new_tokens,
                min_new_tokens=min_new_tokens,
                seed=stream_seed(seed, chunk_index, 1, seed_stream),
            )
        return [
            Rollout(problem_id=p.id, completions=completions[i * k : (i + 1) * k])
            for i, p in enumerate(problems)
        ]

    @torch.no_grad()
    def _generate_rows(
        self,
        rows: Sequence[Any],
        *,
        temperature: float,
        top_p: float,
        max_new_tokens: int,
        min_new_tokens: int = 0,
        seed: int,
    ) -> list[Completion]:
        model = self.model
        device = next(model.parameters()).device
        greedy = temperature == 0
        processors: list[LogitsProcessor] = []
        if not greedy and temperature != 1.0:
            processors.append(TemperatureLogitsWarper(temperature))
        if not greedy and top_p < 1.0:
            processors.append(TopPLogitsWarper(top_p))
        recorder = _LogprobRecorder()
        processors.append(recorder)
        sampler = None if greedy else _SeededSampler(torch.Generator(device).manual_seed(seed), len(rows))
        if sampler is not None:
            processors.append(sampler)
        stop_ids = self.adapter.stop_token_ids
        pad_id = self.adapter.pad_token_id
        was_training = model.training
        model.eval()
        try:
            with _neutral_generation_config(model, stop_ids, pad_id):
                shared = self._shared_prefix(rows, device) if self.share_prompt else None
                generated, logprobs = segmented_generate(
                    model,
                    shared if shared is not None else self._with_cache(self._inputs(rows, device)),
                    LogitsProcessorList(processors),
                    sampler=sampler,
                    recorder=recorder,
                    ends=[*stop_ids, *self.adapter.placeholder_token_ids],
                    max_new_tokens=max_new_tokens,
                    min_new_tokens=min_new_tokens,
                    prune=self.prune_finished,
                    do_sample=False,
                    # a forced length also keeps image placeholders out (a sampled one would cut the completion)
                    suppress_tokens=self.adapter.placeholder_token_ids if min_new_tokens else None,
                    eos_token_id=stop_ids,
                    pad_token_id=pad_id,
                    use_cache=True,
                )
        finally:
            model.train(was_training)
        forbidden = self.adapter.placeholder_token_ids
        result = []
        for row_ids, row_lp in zip(generated, logprobs):
            ids, reason = cut_at_stop(row_ids, stop_ids, forbidden)
            text = self.adapter.decode(ids)
            result.append(Completion(ids=ids, text=text, logprobs=row_lp[: len(ids)], finish_reason=reason))
        return result

    def _inputs(self, rows: Sequence[Any], device: Any) -> dict[str, torch.Tensor]:
        batch = {k: v.to(device) for k, v in self.adapter.generation_batch(rows).items()}
        if "pixel_values" in batch and batch["pixel_values"].is_floating_point():
            batch["pixel_values"] = batch["pixel_values"].to(
                weights_dtype(self.model, self.adapter.torch_dtype)
            )
        return batch

    def _with_cache(self, batch: dict[str, Any]) -> dict[str, Any]:
        """``generate``'s inputs with a :func:`~corl_vl.rollout.hf_cache.growing_cache` where the engine uses one."""
        return {**batch, "past_key_values": growing_cache(self.model)} if self.grow_cache else batch

    def _shared_prefix(self, rows: Sequence[Any], device: Any) -> dict[str, Any] | None:
        """``generate``'s inputs for ``rows`` with each distinct prompt prefilled once; None: no prompt repeats
        (or the model's cache cannot be continued), the plain path.

        Why: rows are a prompt repeated K times; prefilling each (as ``num_return_sequences`` also does) runs the
        picture through the tower and the prompt through the model K times. Here the distinct prompts but their
        last token run once (a 1-token ``generate``: HF's own positions, M-RoPE included), the cache is expanded
        to the rows (Qwen-VL's ``rope_deltas`` with it), and ``generate`` continues from it: the last prompt
        token and every new one see the keys and values a full prefill gives; picture inputs are not needed.
        """
        starts = [i for i in range(len(rows)) if i == 0 or rows[i] is not rows[i - 1]]
        if len(starts) == len(rows):
            return None
        per_row = {"input_ids", "attention_mask", "token_type_ids", "mm_token_type_ids"}
        distinct = self._inputs([rows[i] for i in starts], device)  # as wide as all rows': the same prompts
        if distinct["input_ids"].shape[1] < 2:
            return None
        prefix = {k: v[:, :-1] if k in per_row else v for k, v in distinct.items()}
        out = self.model.generate(
            **self._with_cache(prefix),
            do_sample=False,
            max_new_tokens=1,
            return_dict_in_generate=True,
            use_cache=True,
        )
        cache = out.past_key_values
        if cache is None or cache.get_seq_length() != prefix["input_ids"].shape[1]:
            return None
        counts = torch.tensor([end - start for start, end in zip(starts, [*starts[1:], len(rows)])])
        expand = torch.repeat_interleave(torch.arange(len(starts)), counts).to(device)
        cache.batch_select_indices(expand)
        base = getattr(self.model, "model", None)
        deltas = getattr(base, "rope_deltas", None)
        if isinstance(deltas, torch.Tensor) and deltas.shape[0] == len(starts):
            base.rope_deltas = deltas[expand]
        return {**{k: v[expand] for k, v in distinct.items() if k in per_row}, "past_key_values": cache}

    def sync_weights(self, model: Any) -> None:
        if model is not self.model:
            self.model.load_state_dict(engine_state_dict(model))  # LoRA merged: a plain model

    def sleep(self) -> None:
        """Nothing to release: HF generate holds no memory between calls."""

    def wake(self, tags: Sequence[str] | None = None) -> None:
        """See :meth:`sleep`; ``tags`` (parts of an engine's memory) mean nothing here."""
