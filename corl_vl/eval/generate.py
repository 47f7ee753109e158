"""Generating benchmark responses through the same adapters and rollout engines as training.

Why the same path: a model is judged on the prompt format it was trained with (the VLM release trained with
``<think>/<answer>`` tags but evaluated with ``\\boxed{}``); here the adapter renders the prompt exactly as in
training, and the rollout engine (HF ``generate`` or vLLM) samples it.

Decoding defaults are the paper's: vision benchmarks greedy (long side ≤ 1024, up to 16,384 new tokens), text
benchmarks T = 0.6, top-p 0.95 (3,072 new tokens). Sampling several responses per record (AMC avg@8, or an
ensemble) at T = 0 would repeat one answer, so a greedy benchmark samples at T = 0.6, top-p 0.95 then.

Resumable: every finished batch is appended to ``DIR/generations/<run>/<benchmark>.jsonl`` with a fingerprint
of the decoding settings; a rerun skips records already generated with the same settings.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from corl_vl.data.problem import Problem
from corl_vl.errors import CorlError
from corl_vl.io import read_jsonl

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

    def fingerprint(self, model: str, answer_format: str) -> str:
        blob = json.dumps({**asdict(self), "model": model, "answer_format": answer_format}, sort_keys=True)
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
    tokens = max_new_tokens or (VISION_MAX_NEW_TOKENS if multimodal else TEXT_MAX_NEW_TOKENS)
    if samples < 1 or tokens < 1 or temp < 0 or not 0 < p <= 1:
        raise CorlError(
            f"bad decoding settings: samples={samples}, max_new_tokens={tokens}, T={temp}, top_p={p}"
        )
    return Decoding(temp, p, tokens, samples, seed)


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


def _progress(
    total: int, description: str, enabled: bool
) -> tuple[Callable[[int], None], Callable[[], None]]:
    """(advance, close) of a rich progress bar; no-ops when disabled."""
    if not enabled:
        return (lambda _n: None), (lambda: None)
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
    task = bar.add_task(description, total=total)
    bar.start()
    return (lambda n: bar.advance(task, n)), bar.stop


class Generator:
    """One model loaded once, generating responses for any number of benchmarks.

    Args:
        model: preset name, local checkpoint folder, or hub id (with ``adapter``).
        adapter: explicit adapter name (needed for a hub id).
        engine: ``hf`` or ``vllm`` (the training rollout engines).
        device: torch device for the HF engine.
        batch_size: completions per ``generate`` call.
        max_long_side: image long-side cap (the paper: 1024).
        dtype: weights dtype for the adapter.
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
        dtype: str = "float32",
        answer_format: str | None = None,
    ) -> None:
        from corl_vl.rollout import create_engine
        from model_adapters.images import ImageOptions
        from model_adapters.registry import create_adapter

        self.model_name = model
        kwargs: dict[str, Any] = {"dtype": dtype, "image_options": ImageOptions(max_long_side=max_long_side)}
        if answer_format is not None:
            kwargs["answer_format"] = answer_format
        self.adapter = create_adapter(model, adapter=adapter, **kwargs)
        self.batch_size = max(1, batch_size)
        weights = self.adapter.load_model(device=device) if engine == "hf" else None
        options: dict[str, Any] = {"batch_size": self.batch_size} if engine == "hf" else {}
        try:
            self.engine = create_engine(engine, self.adapter, weights, **options)
        except ImportError as err:
            raise CorlError(f"rollout engine '{engine}' is not available here ({err})") from None

    @property
    def supports_images(self) -> bool:
        return bool(self.adapter.supports_images)

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
        fingerprint = decoding.fingerprint(self.adapter.model_path, self.adapter.answer_format)
        done = read_cache(cache_path, fingerprint)
        todo = [p for p in problems if len(done.get(p.id, ())) < decoding.samples]
        advance, close = _progress(len(problems), description, progress)
        advance(len(problems) - len(todo))
        per_call = max(1, self.batch_size // decoding.samples)  # problems per engine call
        try:
            for start in range(0, len(todo), per_call):
                chunk = todo[start : start + per_call]
                rollouts = self.engine.generate(
                    chunk, k=decoding.samples, temperature=decoding.temperature, top_p=decoding.top_p,
                    max_new_tokens=decoding.max_new_tokens, seed=decoding.seed + start,
                )  # fmt: skip
                rows = []
                for problem, rollout in zip(chunk, rollouts):
                    if rollout.problem_id != problem.id:
                        raise RuntimeError(
                            f"rollout for {rollout.problem_id} returned in place of {problem.id}"
                        )
                    texts = [c.text for c in rollout.completions]
                    done[problem.id] = texts
                    rows.append({"id": problem.id, "fingerprint": fingerprint, "responses": texts})
                _append(cache_path, rows)
                advance(len(chunk))
        finally:
            close()
        return {p.id: done[p.id] for p in problems}
