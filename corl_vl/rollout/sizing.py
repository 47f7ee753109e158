"""How a vLLM engine is sized to the job: context length, image limit, sleep level, per-rank seed streams.

Pure functions, so the choices are testable without an engine (vLLM refuses sleep on CPU, and seeds across
ranks need no process group to be checked).

- ``max_model_len``: vLLM sizes its KV cache (and refuses to start without room) for the model's full context
  unless told otherwise; the job needs the longest prompt (image tokens included: vLLM counts the expanded
  prompt) plus ``grpo.max_new_tokens``. :data:`MAX_MODEL_LEN_MARGIN` covers a rendering that grows after
  start-up: templates that print today's date render one or two tokens longer on another day.
- sleep level 2 when the weights are synced before every rollout: level 1 copies the weights to pinned CPU
  memory on sleep and back on wake, only for the sync to overwrite them; level 2 drops them, and the agent
  syncs after every wake from level 2 (the engine says so through ``needs_weights``).
- seed streams: the ranks of one agent's group split a step's problems, and every engine numbers its
  requests from 0; without the rank in the seed, problem 0 of every rank would draw the same random stream.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from corl_vl.errors import CorlError

MAX_MODEL_LEN_MARGIN = 16  # tokens beyond the longest prompt + completion (module docstring)


def default_max_model_len(longest_prompt: int, max_new_tokens: int) -> int:
    """``rollout.max_model_len: null``: the longest rendered prompt + ``grpo.max_new_tokens`` + the margin."""
    return longest_prompt + max_new_tokens + MAX_MODEL_LEN_MARGIN


def sleep_level(*, weights_synced_every_step: bool) -> int:
    """vLLM's sleep level between rollouts: 2 (drop the weights) when a sync rewrites them before every
    rollout, else 1 (keep a CPU copy to restore)."""
    return 2 if weights_synced_every_step else 1


def seed_stream(group_rank: int, group_size: int, tensor_parallel_size: int = 1) -> tuple[int, int]:
    """``(stream, streams)`` of one rank: the ranks of one tensor-parallel group run the same requests and
    share a stream; each TP group of the agent's group has its own."""
    if group_size % tensor_parallel_size or not 0 <= group_rank < group_size:
        raise CorlError(
            f"rank {group_rank} of a group of {group_size} does not split into tensor-parallel groups of "
            f"{tensor_parallel_size}"
        )
    return group_rank // tensor_parallel_size, group_size // tensor_parallel_size


def stream_seed(seed: int, index: int, stride: int, stream: tuple[int, int] = (0, 1)) -> int:
    """The seed of request (or chunk) ``index`` on ``stream``: index-major, streams interleaved, ``stride``
    apart (vLLM seeds sample j of a request with ``seed + j``, so its stride is K). One stream: ``seed +
    index · stride``, the one-process seeds."""
    own, streams = stream
    return seed + (index * streams + own) * stride


def check_images(rows: Sequence[Any], limit: int, what: str = "rollout.max_images_per_prompt") -> None:
    """One line naming the first problem (a Problem, or its rendered PromptInputs) with more images than
    vLLM is told to accept per prompt."""
    for row in rows:
        n = len(getattr(row, "images", None) or [])
        if n > limit:
            name = getattr(row, "problem_id", None) or row.id
            raise CorlError(
                f"problem {name!r}: {n} images, more than {what}={limit}; raise {what} or leave the "
                "problem out of the data"
            )


def check_prompt_fits(prompts: Sequence[Any], max_new_tokens: int, max_model_len: int | None) -> None:
    """One line naming the first prompt whose tokens plus ``max_new_tokens`` exceed the engine's context
    (past it vLLM refuses the prompt, or cuts the completion short without saying why)."""
    if max_model_len is None:
        return
    for prompt in prompts:
        n = len(prompt.prompt_ids)
        if n + max_new_tokens > max_model_len:
            raise CorlError(
                f"problem {prompt.problem_id!r}: a {n}-token prompt + grpo.max_new_tokens ({max_new_tokens}) "
                f"exceeds rollout.max_model_len={max_model_len}; raise rollout.max_model_len (or set it to "
                "null: the longest prompt + max_new_tokens) or leave the problem out"
            )


def longest_prompt(adapter: Any, problems: Sequence[Any]) -> tuple[int, str | None]:
    """``(tokens, problem id)`` of the longest rendered prompt of ``problems`` (each rendered once here)."""
    best, which = 0, None
    for problem in problems:
        n = len(adapter.encode_prompt(problem))
        if n > best:
            best, which = n, problem.id
    return best, which
