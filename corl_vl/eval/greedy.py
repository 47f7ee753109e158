"""The one greedy evaluator: each agent's greedy answers (validation during training, ``corl_vl.evaluate``,
held-out accuracy per skill and overall on problems no agent ever trains on).

Why one module: validation, the demo and the toy reproduction need the *same* yardstick before, during and after
label-free RL — greedy decoding (as the paper evaluates VLMs), the same prompt format the agent trains with
(the adapter's), the same answer extraction and equivalence the rewards use — on the synthetic ``test``
split, which is disjoint from ``train`` by construction. Labels are read here and only here: for reporting,
never for training or for choosing a checkpoint.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from corl_vl.answers import extract_answer
from corl_vl.answers.equivalence import equivalent
from corl_vl.data.problem import Problem
from corl_vl.errors import CorlError


@dataclass
class HeldoutResult:
    """Accuracy overall and per skill, plus the share of completions with a parseable answer."""

    overall: float
    per_skill: dict[str, float]
    parsed: float
    n: int
    counts: dict[str, int] = field(default_factory=dict)
    answers: dict[str, str | None] = field(default_factory=dict)  # problem id → extracted answer
    correct: dict[str, bool] = field(default_factory=dict)  # problem id → graded right (for κ between models)

    def as_dict(self) -> dict[str, Any]:
        return {
            "overall": self.overall,
            "per_skill": dict(self.per_skill),
            "parsed": self.parsed,
            "n": self.n,
        }


def heldout_problems(
    n_per_skill: int, skills: Sequence[str], *, seed: int = 0, text_view: bool = False
) -> list[Problem]:
    """``n_per_skill`` synthetic *test-split* problems per skill: pictures, or their text rendering (the
    ablation) when ``text_view``."""
    # lazy: PIL
    from corl_vl.data.synth import generate_problems, to_text_problem

    problems = generate_problems(n_per_skill * len(skills), seed=seed, split="test", skills=list(skills))
    return [to_text_problem(p) for p in problems] if text_view else problems


def blank_images(problems: Sequence[Problem]) -> list[Problem]:
    """The same problems with every picture replaced by a white one of the same size.

    The check that a model answers from the picture: a skill read from pixels must fall to chance here, while
    a model that ignores the image (or reads the answer off the question) would keep its accuracy.
    """
    # lazy: PIL
    from PIL import Image

    from corl_vl.data.images import open_image

    def white(image: Any) -> Image.Image:
        return Image.new("RGB", open_image(image).size, (255, 255, 255))

    return [dataclasses.replace(p, images=[white(i) for i in p.images]) for p in problems]


def greedy_answers(
    engine: Any, problems: Sequence[Problem], max_new_tokens: int, prompts: Sequence[Any] | None = None
) -> dict[str, str | None]:
    """``{problem id: extracted answer}`` of one greedy completion per problem from ``engine`` (an HF engine
    on the model to evaluate: :func:`greedy_engine`)."""
    rollouts = engine.generate(
        problems, k=1, temperature=0.0, max_new_tokens=max_new_tokens, seed=0, prompts=prompts
    )
    answers: dict[str, str | None] = {}
    for problem, rollout in zip(problems, rollouts, strict=True):
        if rollout.problem_id != problem.id:
            raise CorlError(f"held-out evaluation: engine returned {rollout.problem_id} for {problem.id}")
        answers[problem.id] = extract_answer(rollout.completions[0].text, problem.choices)
    return answers


def greedy_engine(adapter: Any, model: Any, batch_size: int = 32) -> Any:
    """The HF rollout engine over ``model`` itself (no copy): what held-out evaluation generates with."""
    # lazy: PIL, numpy, tokenizers, torch, transformers
    from corl_vl.rollout.hf import HFEngine

    return HFEngine(adapter, model, batch_size=batch_size)


def heldout_accuracy(
    adapter: Any,
    model: Any,
    problems: Sequence[Problem],
    *,
    max_new_tokens: int = 16,
    batch_size: int = 32,
    prompts: Sequence[Any] | None = None,
) -> HeldoutResult:
    """Greedy answers of ``model`` to ``problems`` through the HF rollout engine, graded against their labels.

    ``prompts`` (the adapter's encodings of ``problems``) may be passed to skip re-encoding across repeated
    evaluations. The model's train/eval mode is restored afterwards (the engine switches to eval itself).
    """
    if not problems:
        raise CorlError("held-out evaluation: no problems")
    missing = [p.id for p in problems if p.answer is None]
    if missing:
        raise CorlError(f"held-out evaluation: problem {missing[0]} has no label")
    answers = greedy_answers(greedy_engine(adapter, model, batch_size), problems, max_new_tokens, prompts)
    hits: dict[str, list[bool]] = {}
    correct: dict[str, bool] = {}
    parsed = 0
    for problem in problems:
        answer = answers[problem.id]
        parsed += answer is not None
        ok = answer is not None and equivalent(problem.answer, answer, problem.choices)
        hits.setdefault(str(problem.meta.get("skill", "all")), []).append(bool(ok))
        correct[problem.id] = bool(ok)
    total = sum(sum(v) for v in hits.values())
    return HeldoutResult(
        overall=total / len(problems),
        per_skill={skill: sum(v) / len(v) for skill, v in sorted(hits.items())},
        parsed=parsed / len(problems),
        n=len(problems),
        counts={skill: len(v) for skill, v in sorted(hits.items())},
        answers=answers,
        correct=correct,
    )


def evaluate_checkpoint(path: str, problems: Sequence[Problem], **kwargs: Any) -> HeldoutResult:
    """Load a checkpoint folder (or preset) and evaluate it (see :func:`heldout_accuracy`)."""
    # lazy: PIL, numpy, tokenizers
    from model_adapters.registry import create_adapter

    adapter = create_adapter(path)
    return heldout_accuracy(adapter, adapter.load_model(), problems, **kwargs)
