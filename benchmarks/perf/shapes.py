"""The batch shapes of ``vs_trl.py`` and what both arms share: problems, forced answers, forced completion
lengths, and the counters (vision-tower images per step, padded tokens) read the same way in both arms.

``tiny``: 4 problems × K = 8 × exactly ``--tokens`` new tokens (``min_new_tokens``), the synthetic 168-pixel
pictures at the tiny VLM's own processor size (224 × 224, 64 picture tokens).
``paper``: the shape VLM RL has — pictures upscaled to a 1,024-pixel long side and the adapter's
``max_pixels`` raised so the tiny Qwen2.5-VL keeps them (1,008 × 1,008 after its 28-pixel grid: 1,296 picture
tokens, a 1,347-token prompt), K = 8, and each completion's length drawn from a long-tailed (log-normal,
median 160) distribution clipped to 32–1,024 tokens, forced by a logits processor in front of the sampler:
stop tokens (and image placeholders) are banned before the drawn length, the stop token is forced at it.
The c-th generation of a model gives its row r the length ``draw_length(c, r)``: rows are problem-major
K at a time in both arms, so both arms train the same lengths step for step. TRL generates with one ``generate``
call; corl-vl's HF engine continues its unfinished rows in further calls once rows finish (finished rows leave
the decode batch), tagging each call's processor list ``segment = (original row indices, tokens made before
it)``: a continuation keeps each original row's drawn length and counts its tokens from the first call's start.
"""

from __future__ import annotations

import dataclasses
import math
import random
import zlib
from collections import Counter
from typing import Any

FAMILIES = {"text": "tiny-qwen2.5", "vl": "tiny-qwen2.5-vl"}
PAPER_LONG_SIDE = 1024
PAPER_MAX_PIXELS = PAPER_LONG_SIDE * PAPER_LONG_SIDE  # the tiny processor's own cap is 50,176 (224 × 224)
PAPER_LENGTHS = (32, 1024)


def forced_answer(ids: list[int]) -> str:
    """The answer a completion 'states': a fixed function of its sampled token ids (same in both arms)."""
    return str(zlib.crc32(bytes(str(list(ids)), "ascii")) % 3)


def paper_answer(j: int) -> str:
    """``--shape paper``: the j-th completion of a group states "0" (5 of 8) or "1": a majority that is not
    unanimous, so every arm's every agent trains every step (TTRL and Co-RL alike)."""
    return "0" if j < 5 else "1"


def stated_answer(ids: list[int], j: int, shape: str) -> str:
    return paper_answer(j) if shape == "paper" else forced_answer(ids)


def majority_rewards(answers: list[str], k: int) -> list[float]:
    """TTRL on consecutive groups of K: 1 where the answer is its group's most common one."""
    out = []
    for g in range(0, len(answers), k):
        group = answers[g : g + k]
        top = Counter(group).most_common(1)[0][0]
        out += [float(a == top) for a in group]
    return out


def peak_rss_mb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def problems(family: str, n: int, shape: str = "tiny") -> list[Any]:
    """The synthetic training problems; ``paper``: pictures upscaled to a 1,024-pixel long side."""
    from corl_vl.data.synth import generate_problems, to_text_problem

    base = generate_problems(n, seed=0, split="train")
    if family != "vl":
        return [to_text_problem(p) for p in base]
    if shape != "paper":
        return base
    return [dataclasses.replace(p, images=[upscaled(im) for im in p.images]) for p in base]


def upscaled(image: Any) -> Any:
    from PIL import Image

    from model_adapters.images import load_image

    picture = load_image(image)
    scale = PAPER_LONG_SIDE / max(picture.size)
    size = (round(picture.width * scale), round(picture.height * scale))
    return picture.resize(size, Image.Resampling.BICUBIC)


def draw_length(call: int, row: int) -> int:
    """Completion length of row ``row`` of a model's ``call``-th generate: log-normal, median 160, in 32–1,024."""
    rng = random.Random(f"vs-trl-length:{call}:{row}")
    lo, hi = PAPER_LENGTHS
    return int(min(hi, max(lo, round(math.exp(rng.gauss(math.log(160), 0.8))))))


class ForcedLengths:
    """A logits processor forcing row r to stop after exactly ``lengths[r]`` new tokens (see module doc)."""

    def __init__(self, lengths: list[int], start: int, stop_ids: list[int], banned: list[int]) -> None:
        import torch

        self.lengths = torch.tensor(lengths)
        self.start, self.stop, self.banned = start, stop_ids[0], sorted({*stop_ids, *banned})

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        made = input_ids.shape[1] - self.start
        scores = scores.clone()
        early = (self.lengths.to(scores.device) > made).nonzero().flatten()
        done = (self.lengths.to(scores.device) <= made).nonzero().flatten()
        scores[early[:, None], self.banned] = -math.inf
        scores[done] = -math.inf
        scores[done, self.stop] = 0.0
        return scores


def force_lengths(model: Any, stop_ids: list[int], banned: list[int], max_new_tokens: int) -> None:
    """Make ``model.generate`` (an instance attribute wraps it) force the drawn lengths on every generation."""
    from transformers import LogitsProcessorList

    inner, calls, drawn = model.generate, [0], [[]]

    def generate(*args: Any, **kwargs: Any) -> Any:
        given = kwargs.get("logits_processor")
        if (
            kwargs.get("max_new_tokens") == 1 and given is None
        ):  # corl-vl's shared prompt prefill: no completion
            return inner(*args, **kwargs)
        rows, width = kwargs["input_ids"].shape
        segment = getattr(given, "segment", None)
        if segment is not None and segment[1] > 0:  # corl-vl continuing its unfinished rows (see module doc)
            lengths, start = [drawn[0][r] for r in segment[0]], width - segment[1]
        else:
            lengths = [min(draw_length(calls[0], r), max_new_tokens) for r in range(rows)]
            drawn[0], start = lengths, width
            calls[0] += 1
        processors = LogitsProcessorList(kwargs.pop("logits_processor", None) or [])
        processors.insert(0, ForcedLengths(lengths, start, stop_ids, banned))  # before any sampler
        return inner(*args, logits_processor=processors, **kwargs)

    model.generate = generate


def vision_tower(model: Any) -> Any:
    """The model's vision tower (``model.visual``, ``vision_tower``, ``vision_model``); None for text models."""
    names = ("visual", "vision_tower", "vision_model")
    found = [(name, m) for name, m in model.named_modules() if name.rsplit(".", 1)[-1] in names]
    return min(found, key=lambda item: len(item[0]))[1] if found else None


class VisionCounter:
    """Pictures the vision tower encodes (and its calls), split into gradient passes and no-grad passes
    (rollout prefill, scoring), by a forward pre-hook — arm-agnostic."""

    def __init__(self, model: Any) -> None:
        self.counts = {"calls": 0, "images": 0, "images_grad": 0, "patches": 0}  # patches: the pictures' size
        tower = vision_tower(model)
        if tower is not None:
            tower.register_forward_pre_hook(self._hook, with_kwargs=True)

    def _hook(self, _module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        import torch

        grid = kwargs.get("grid_thw", args[1] if len(args) > 1 else None)
        pixels = args[0] if args else kwargs.get("pixel_values", kwargs.get("hidden_states"))
        images = int(grid.shape[0]) if grid is not None else int(pixels.shape[0])
        self.counts["calls"] += 1
        self.counts["images"] += images
        self.counts["patches"] += int(grid.prod(-1).sum()) if grid is not None else int(pixels.shape[0])
        if torch.is_grad_enabled():
            self.counts["images_grad"] += images

    def take(self) -> dict[str, int]:
        counts, self.counts = dict(self.counts), dict.fromkeys(self.counts, 0)
        return counts


class PaddingCounter:
    """Padded and computed tokens of the model's gradient forwards (``attention_mask`` zeros ÷ its size), by a
    forward pre-hook — the same count in both arms (left- or right-padded alike)."""

    def __init__(self, model: Any) -> None:
        self.padded = self.computed = 0
        model.register_forward_pre_hook(self._hook, with_kwargs=True)

    def _hook(self, _module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        import torch

        mask = kwargs.get("attention_mask")
        if mask is None or not torch.is_grad_enabled():
            return
        self.computed += int(mask.numel())
        self.padded += int(mask.numel() - mask.bool().sum())

    def take(self) -> float | None:
        """The padding share since the last call (None: no gradient forward)."""
        padded, computed = self.take_counts()
        return padded / computed if computed else None

    def take_counts(self) -> tuple[int, int]:
        """``(padded, computed)`` tokens since the last call."""
        counts = (self.padded, self.computed)
        self.padded = self.computed = 0
        return counts
