"""What an adapter makes of a checkpoint's prompt format, for ``corl-vl adapters check`` (no weights loaded).

Why: a new checkpoint can ship a template that differs from its family's (a second BOS, an image placeholder
the processor does not expand, a clock-dependent system block). Rendering one text problem and one image
problem and counting BOS and image tokens shows each of those in seconds, before any training.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from PIL import Image, ImageDraw

from corl_vl.data.problem import Problem
from corl_vl.errors import CorlError

from .base import ModelAdapter

TEXT_QUESTION = "What is 6 times 7?"
IMAGE_QUESTION = "How many circles are in the figure?"


@dataclass
class PromptReport:
    """One rendered problem: the prompt text and its token counts (or the error it raised)."""

    kind: str  # "text" or "image"
    images: int
    prompt_text: str = ""
    prompt_tokens: int = 0
    bos_count: int = 0
    image_tokens: int = 0  # expanded image tokens the model sees
    error: str | None = None


@dataclass
class AdapterReport:
    """Everything ``adapters check`` prints."""

    model: str
    adapter: str
    template_reads_clock: bool
    template_date: str
    stop_tokens: list[tuple[int, str]]
    bos_token: str | None
    image_token: str | None
    prompts: list[PromptReport] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(p.error is None and p.bos_count <= 1 for p in self.prompts)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ok": self.ok}


def _circles_image() -> Any:
    """A small figure with three circles (any RGB image would do; this one matches the question)."""
    image = Image.new("RGB", (224, 168), "white")
    draw = ImageDraw.Draw(image)
    for x in (20, 90, 160):
        draw.ellipse((x, 50, x + 50, 100), outline="black", width=3)
    return image


def _report(adapter: ModelAdapter, problem: Problem, kind: str) -> PromptReport:
    report = PromptReport(kind=kind, images=len(problem.images))
    try:
        prompt = adapter.encode_prompt(problem)
    except CorlError as err:
        report.error = str(err)
        return report
    bos = adapter.tokenizer.bos_token_id
    image_ids = set(adapter.placeholder_token_ids)
    report.prompt_text = prompt.prompt_text
    report.prompt_tokens = len(prompt.prompt_ids)
    report.bos_count = prompt.prompt_ids.count(bos) if bos is not None else 0
    report.image_tokens = sum(1 for t in prompt.prompt_ids if t in image_ids)
    return report


def check_adapter(adapter: ModelAdapter) -> AdapterReport:
    """Render a text problem (and an image problem for VLMs) with ``adapter`` and count what matters."""
    tok = adapter.tokenizer
    record = adapter.prompt_record()
    report = AdapterReport(
        model=adapter.model_path,
        adapter=adapter.name,
        template_reads_clock=record["template_reads_clock"],
        template_date=adapter.template_date,
        stop_tokens=[(i, tok.convert_ids_to_tokens(i)) for i in adapter.stop_token_ids],
        bos_token=tok.bos_token,
        image_token=adapter.image_token,
    )
    report.prompts.append(_report(adapter, Problem("check-text", TEXT_QUESTION), "text"))
    if adapter.supports_images:
        image_problem = Problem("check-image", IMAGE_QUESTION, images=[_circles_image()])
        report.prompts.append(_report(adapter, image_problem, "image"))
    return report
