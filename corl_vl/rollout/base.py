"""The rollout-engine protocol: problems in, K completions per problem out, with *processed* logprobs.

Why a protocol: the trainer must not care whether completions came from HF ``generate`` or vLLM. Both return
the completion token ids (including the stop token when the completion stopped), the decoded text, and one
logprob per token under the distribution the token was actually *sampled* from (after temperature / top-p) —
the quantity the token-level importance ratio needs (raw logprobs bias the ratio at T ≠ 1).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from corl_vl.data.problem import Problem
from corl_vl.errors import CorlError

if TYPE_CHECKING:
    from model_adapters.base import PromptInputs


@dataclass
class Completion:
    """One sampled completion.

    Attributes:
        ids: completion token ids; ends with the stop token when ``finish_reason == "stop"``.
        text: decoded text without special tokens.
        logprobs: per-token processed logprobs, exactly one per id (else construction raises: a short list
            padded with 0.0 would silently down-weight the importance ratio); NaN where the engine had none
            for a token — the trainer then gives that token weight 1 and counts it. At temperature 0 (greedy)
            they are at T = 1.
        finish_reason: ``"stop"`` (a stop token ended it), ``"length"`` (hit max_new_tokens: clipped) or
            ``"invalid"`` (cut before a forbidden token, see :func:`cut_at_stop`; also counted as clipped).
    """

    ids: list[int]
    text: str
    logprobs: list[float]
    finish_reason: str

    def __post_init__(self) -> None:
        if len(self.logprobs) != len(self.ids):
            raise CorlError(
                f"rollout engine returned {len(self.logprobs)} logprobs for a completion of {len(self.ids)} "
                "tokens; an engine must give exactly one per completion token"
            )

    @property
    def clipped(self) -> bool:
        return self.finish_reason != "stop"


@dataclass
class Rollout:
    """The K completions of one problem, keyed by the problem's id."""

    problem_id: str
    completions: list[Completion] = field(default_factory=list)


@runtime_checkable
class RolloutEngine(Protocol):
    """What the trainer needs from an inference engine.

    Optional attributes the trainer reads with a default: ``reads_trainer_weights`` (True: generation reads
    the trainer's module, whose weights ZeRO-3 must gather first; False for an engine with its own synced
    copy), ``streams_weights`` (True: ``sync_weights`` takes a ZeRO-3 ``gather`` keyword and gathers one parameter
    at a time, :mod:`corl_vl.rollout.vllm_sync`), ``needs_weights`` (True after the engine dropped its weights:
    sync before the next generate).
    """

    def generate(
        self,
        problems: Sequence[Problem],
        *,
        k: int,
        temperature: float,
        top_p: float,
        max_new_tokens: int,
        seed: int,
        prompts: Sequence[PromptInputs] | None = None,
        min_new_tokens: int = 0,
        seed_stream: tuple[int, int] = (0, 1),
    ) -> list[Rollout]:
        """K completions per problem, in the problems' order. ``temperature == 0`` means greedy.

        ``min_new_tokens``: no stop token is sampled before that many new tokens (benchmarks force a fixed
        length with it); the trainer passes it only when it is set, so an engine may omit the keyword.

        ``seed_stream``: ``(stream, streams)`` of this rank (:func:`corl_vl.rollout.sizing.seed_stream`) when
        several ranks of one agent split the problems: no two streams may draw the same random numbers. Passed
        only with more than one stream.

        ``prompts`` (the adapter's encodings of ``problems``): when given, an engine generates from exactly
        these token ids and images and renders nothing itself — the trainer scores the same ids (render once).
        Without them the engine encodes each problem once. Same ``seed`` and weights → same completions.
        """
        ...

    def sync_weights(self, model: Any) -> None:
        """Make the engine sample from ``model``'s current weights; called with its weights awake and its KV
        cache asleep (the agent wakes ``["weights"]``, syncs, then wakes ``["kv_cache"]``).

        The agent alone drives sleep / wake / sync, in that order (:meth:`corl_vl.train.agent.Agent.prepare_engine`).
        """
        ...

    def sleep(self) -> None:
        """Release accelerator memory during the update phase (no-op where unsupported)."""
        ...

    def wake(self, tags: Sequence[str] | None = None) -> None:
        """Undo :meth:`sleep` before the next rollout; ``tags`` wakes only those parts of its memory.

        ``None``: everything. ``["weights"]`` then ``["kv_cache"]``: the agent syncs in between, so the sync's
        temporary memory never meets the KV cache on the device (vLLM's tags; an engine without such parts
        treats any call as a full wake).
        """
        ...


def cut_at_stop(
    ids: Sequence[int], stop_ids: Sequence[int], forbidden: Sequence[int] = ()
) -> tuple[list[int], str]:
    """Keep tokens up to and including the first stop token; finish reason ``stop`` or ``length``.

    A ``forbidden`` token (an image placeholder a model sampled as text) ends the completion *before* it, with
    reason ``invalid``: fed back to the trainer it would be taken for an image slot and break the forward.
    Cutting keeps every remaining token's logprob exact (suppressing the token would change them all).
    """
    stops, bad = set(stop_ids), set(forbidden)
    for i, tok in enumerate(ids):
        if tok in bad:
            return list(ids[:i]), "invalid"
        if tok in stops:
            return list(ids[: i + 1]), "stop"
    return list(ids), "length"


@contextlib.contextmanager
def engine_errors(agent: str) -> Iterator[None]:
    """An engine's one-line error (e.g. a failure inside vLLM) also says whose engine it is."""
    try:
        yield
    except CorlError as err:
        raise CorlError(f"agent {agent}: {err}") from err
