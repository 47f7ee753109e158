"""Generating benchmark responses through the same adapters and rollout engines as training.

Why the same path: a model is judged on the prompt format it was trained with (the VLM release trained with
``<think>/<answer>`` tags but evaluated with ``\\boxed{}``); here the adapter renders the prompt exactly as in
training, and the rollout engine (HF ``generate`` or vLLM) samples it.

Decoding defaults are the paper's: vision benchmarks greedy (long side ≤ 1024, up to 16,384 new tokens), text
benchmarks T = 0.6, top-p 0.95 (3,072 new tokens). Sampling several responses per record (AMC avg@8, or an
ensemble) at T = 0 would repeat one answer, so a greedy benchmark samples at T = 0.6, top-p 0.95 then.
Whatever is asked, prompt + completion must fit the model's context: ``max_new_tokens`` is capped at the
context length (its config's ``max_position_embeddings``) minus the prompt, with a warning — small models
would otherwise be asked for 16,384 tokens they cannot produce, and run for a very long time.

Resumable: every finished batch is appended to ``DIR/generations/<run>/<benchmark>.jsonl`` with a fingerprint
of everything that changes a response (decoding, model, prompt record, image preparation, dtype, engine, device,
batch size); a rerun skips records already generated with the same settings.
"""

from __future__ import annotations

import hashlib
import json
import math
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from corl_vl.data.problem import Problem
from corl_vl.errors import CorlError
from corl_vl.io import read_jsonl
from corl_vl.rollout import create_engine

VISION_MAX_NEW_TOKENS = 16384
TEXT_MAX_NEW_TOKENS = 3072
SAMPLING = (0.6, 0.95)  # (temperature, top_p) of the text benchmarks, and of any multi-sample run


@dataclass(frozen=True)
class Decoding:
    """Decoding settings of one generation run (part of the cache fingerprint)."""

    temperature: float
    top_p: float
    max_new_tokens: int
    samples: int
    seed: int = 0

    def fingerprint(self, model: str, answer_format: str, **setup: Any) -> str:
        """A hash of these settings and everything else that changes the responses (``setup``: the model's
        prompt record, image preparation, dtype, engine, device, batch size)."""
        inputs = {**asdict(self), "model": model, "answer_format": answer_format, **setup}
        blob = json.dumps(inputs, sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


def default_decoding(
    multimodal: bool,
    samples: int,
    *,
    temperature: float | None = None,
    top_p: float | None = None,
    max_new_tokens: int | None = None,
    seed: int = 0,
) -> Decoding:
    """The paper's defaults for a vision or text benchmark; explicit arguments win."""
    if multimodal and samples == 1:
        temp, p = 0.0, 1.0
    else:
        temp, p = SAMPLING
    if temperature is not None:
        temp = temperature
    if top_p is not None:
        p = top_p
    tokens = (
        max_new_tokens
        if max_new_tokens is not None
        else (VISION_MAX_NEW_TOKENS if multimodal else TEXT_MAX_NEW_TOKENS)
    )
    if samples < 1 or tokens < 1 or not (math.isfinite(temp) and temp >= 0) or not 0 < p <= 1:
        raise CorlError(
            f"bad decoding settings: samples={samples}, max_new_tokens={tokens}, T={temp}, top_p={p}"
        )
    return Decoding(temp, p, tokens, samples, seed)


def check_device(device: str) -> None:
    """Refuse a CUDA device on a machine without one, in one line (torch would assert deep inside a load)."""
    if device.startswith("cuda"):
        # lazy: torch
        import torch

        if not torch.cuda.is_available():
            raise CorlError(f"--device {device}: this machine has no usable CUDA GPU; use --device cpu")


def broken(completion: Any) -> bool:
    """A completion no working model produces: no tokens at all, or a log-probability that is not finite
    (NaN or inf weights or logits)."""
    return not completion.ids or not all(math.isfinite(x) for x in completion.logprobs)


def _check_vllm_folder(folder: Path) -> None:
    """vLLM loads every ``*.safetensors`` of a model folder as weights; an agent folder of a checkpoint written
    before training state moved to ``state/<agent>/`` still holds ``trainer_state.safetensors``."""
    if (folder / "trainer_state.safetensors").is_file():
        raise CorlError(
            f"{folder}: holds training state (trainer_state.*, the layout of older checkpoints), which vLLM would "
            "read as weights; evaluate it with --engine hf, or move trainer_state.* to ../state/<agent>/"
        )


def read_cache(path: Path, fingerprint: str) -> dict[str, list[str]]:
    """Cached responses generated with the same settings (lines with another fingerprint are ignored)."""
    out: dict[str, list[str]] = {}
    if not path.is_file():
        return out
    for _, row in read_jsonl(path, skip_bad=True):  # a line cut by an interrupted run: regenerate that record
        if row.get("fingerprint") == fingerprint and isinstance(row.get("responses"), list):
            out[str(row["id"])] = [str(r) for r in row["responses"]]
    return out


def _append(path: Path, rows: Sequence[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as fh:
        fh.write("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
        fh.flush()


class _Progress:
    """A rich progress bar for one model on one benchmark: records done, tokens/s and ETA; silent if disabled."""

    def __init__(self, total: int, description: str, enabled: bool) -> None:
        self.bar = None
        self.tokens = 0
        self.start = time.perf_counter()
        if not enabled:
            return
        # lazy: rich
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        self.bar = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[rate]}"),
            TextColumn("ETA"),
            TimeRemainingColumn(),
        )
        self.task = self.bar.add_task(description, total=total, rate="")
        self.bar.start()

    def advance(self, records: int, tokens: int = 0) -> None:
        self.tokens += tokens
        if self.bar is None:
            return
        elapsed = max(time.perf_counter() - self.start, 1e-9)
        rate = f"{self.tokens / elapsed:,.0f} tok/s" if self.tokens else ""
        self.bar.update(self.task, advance=records, rate=rate)

    def note(self, message: str) -> None:
        """A warning line that does not tear the live bar."""
        if self.bar is not None:
            self.bar.console.print(message, markup=False, highlight=False)
        else:
            print(message, file=sys.stderr)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()


def context_length(model_path: str, model: Any = None) -> int | None:
    """The longest sequence (prompt + completion) the model's text backbone takes, from its config; None if
    the config does not say."""
    config = getattr(model, "config", None)
    if config is None:
        # lazy: transformers
        from transformers import AutoConfig

        try:
            config = AutoConfig.from_pretrained(model_path)
        except (OSError, ValueError):
            return None
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    value = getattr(text, "max_position_embeddings", None)
    return int(value) if isinstance(value, int) and value > 0 else None


class Generator:
    """One model loaded once, generating responses for any number of benchmarks.

    Args:
        model: preset name, local checkpoint folder, or hub id (with ``adapter``).
        adapter: explicit adapter name (needed for a hub id).
        engine: ``hf`` or ``vllm`` (the training rollout engines).
        device: torch device for the HF engine.
        batch_size: completions per ``generate`` call.
        max_long_side: image long-side cap (the paper: 1024).
        dtype: weights dtype for the adapter (``auto``: bf16 on a CUDA device, else fp32).
        answer_format: the answer instruction (default: the adapter's, i.e. the training format).
    """

    def __init__(
        self,
        model: str,
        *,
        adapter: str | None = None,
        engine: str = "hf",
        device: str = "cpu",
        batch_size: int = 8,
        max_long_side: int = 1024,
        dtype: str = "auto",
        answer_format: str | None = None,
    ) -> None:
        # lazy: PIL, numpy, tokenizers
        from model_adapters.dtypes import resolve_dtype
        from model_adapters.images import ImageOptions
        from model_adapters.registry import create_adapter

        check_device(device)
        dtype = resolve_dtype(dtype, device)  # the fingerprint names the dtype the weights run in
        self.model_name = model
        # what changes the responses besides the decoding settings (the cache fingerprint)
        self.setup: dict[str, Any] = {
            "engine": engine,
            "device": device,
            "dtype": dtype,
            "batch_size": batch_size,
        }
        kwargs: dict[str, Any] = {"dtype": dtype, "image_options": ImageOptions(max_long_side=max_long_side)}
        if answer_format is not None:
            kwargs["answer_format"] = answer_format
        if engine == "vllm":
            _check_vllm_folder(Path(model))
        self.adapter = create_adapter(model, adapter=adapter, **kwargs)
        self.batch_size = max(1, batch_size)
        weights = self.adapter.load_model(device=device) if engine == "hf" else None
        options: dict[str, Any] = {"batch_size": self.batch_size} if engine == "hf" else {}
        try:
            self.engine = create_engine(engine, self.adapter, weights, **options)
        except ImportError as err:
            raise CorlError(f"rollout engine '{engine}' is not available here ({err})") from None
        self.context_length = context_length(self.adapter.model_path, weights)
        self.setup |= {"prompt": self.adapter.prompt_record(), "images": asdict(self.adapter.image_options)}

    def close(self) -> None:
        """Release what the engine holds outside the process (vLLM's weight-sync folder in the cache)."""
        close = getattr(self.engine, "close", None)
        if close is not None:
            close()

    def __enter__(self) -> Generator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def supports_images(self) -> bool:
        return bool(self.adapter.supports_images)

    def _budget(self, requested: int, prompt_tokens: int) -> int:
        """``requested`` new tokens, capped so prompt + completion fit the context (at least one token)."""
        if self.context_length is None:
            return requested
        return max(1, min(requested, self.context_length - prompt_tokens))

    def generate(
        self,
        problems: Sequence[Problem],
        decoding: Decoding,
        cache_path: Path,
        *,
        progress: bool = True,
        description: str = "generating",
    ) -> dict[str, list[str]]:
        """``decoding.samples`` responses per problem, reusing and extending the cache at ``cache_path``."""
        fingerprint = decoding.fingerprint(self.adapter.model_path, self.adapter.answer_format, **self.setup)
        done = read_cache(cache_path, fingerprint)
        todo = [p for p in problems if len(done.get(p.id, ())) < decoding.samples]
        bar = _Progress(len(problems), description, progress)
        bar.advance(len(problems) - len(todo))
        per_call = max(1, self.batch_size // decoding.samples)  # problems per engine call
        warned = False
        n_broken = n_new = 0
        try:
            for start in range(0, len(todo), per_call):
                chunk = todo[start : start + per_call]
                prompts = [self.adapter.encode_prompt(p) for p in chunk]  # rendered once, measured, reused
                longest = max(len(p) for p in prompts)
                budget = self._budget(decoding.max_new_tokens, longest)
                if budget < decoding.max_new_tokens and not warned:
                    warned = True
                    bar.note(
                        f"corl-vl eval: {description}: max_new_tokens {decoding.max_new_tokens} does not fit the "
                        f"context length {self.context_length} minus the prompt ({longest} tokens); capped at "
                        f"{budget} (prompt + completion must fit the context; set --max-new-tokens to choose)"
                    )
                try:
                    rollouts = self.engine.generate(
                        chunk,
                        k=decoding.samples,
                        temperature=decoding.temperature,
                        top_p=decoding.top_p,
                        max_new_tokens=budget,
                        seed=decoding.seed + start,
                        prompts=prompts,
                    )
                except CorlError as err:  # e.g. NaN next-token scores: say which model, not only what
                    raise CorlError(f"{description}: model {self.adapter.model_path}: {err}") from None
                rows = []
                for problem, rollout in zip(chunk, rollouts):
                    if rollout.problem_id != problem.id:
                        raise RuntimeError(
                            f"rollout for {rollout.problem_id} returned in place of {problem.id}"
                        )
                    texts = [c.text for c in rollout.completions]
                    n_new += len(rollout.completions)
                    n_broken += sum(broken(c) for c in rollout.completions)
                    done[problem.id] = texts
                    rows.append({"id": problem.id, "fingerprint": fingerprint, "responses": texts})
                _append(cache_path, rows)
                tokens = sum(len(c.ids) for r in rollouts for c in r.completions)
                bar.advance(len(chunk), tokens)
        finally:
            bar.close()
        if n_broken:
            print(
                f"corl-vl eval: warning: {description}: {n_broken} of {n_new} responses are empty or have "
                f"non-finite log-probabilities; the model {self.adapter.model_path} may hold NaN/inf weights",
                file=sys.stderr,
            )
        return {p.id: done[p.id] for p in problems}
