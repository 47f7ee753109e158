"""Synthetic visual math: procedurally drawn problems with known answers, for demos and tests.

There is no hub access here and the default demo must train on *something* whose answers are known, so
the pictures are drawn with PIL from random parameters (see :mod:`corl_vl.data.synth_skills`). Every
record keeps its parameters in ``meta["params"]``, so anyone can recompute the answer, and carries a
text-only rendering (``meta["text_question"]``) with the picture described in words for text LLMs.

Splits are disjoint by construction: a parameter draw belongs to ``test`` when the hash of
``(skill, params)`` falls in the test quarter of the hash space, else to ``train``; each split keeps only
draws of its own kind, so the same problem can never appear in both, whatever the seeds. ``validation`` (what
``eval.every`` validates on, and selects checkpoints on) draws from the train side with its own random stream:
never a test problem, so choosing on it cannot leak into the reported test numbers, and ``train`` and
``test`` stay exactly what they were (every cached warm start and held-out set is unchanged). It can share a
parameter draw with a training problem only by chance (each skill has thousands of train-side draws), and
label-free training never reads a label.
"""

from __future__ import annotations

import hashlib
import io
import json
import random
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path

from PIL import Image

from corl_vl.data.images import lazy_image
from corl_vl.data.pixel_skills import PIXEL_SKILLS
from corl_vl.data.problem import Problem
from corl_vl.data.synth_skills import EXTRA_SKILLS as _SHAPE_SKILLS
from corl_vl.data.synth_skills import SIZE, SKILLS, Params, Skill
from corl_vl.errors import CorlError
from corl_vl.io import atomic_dir

SPLITS = ("train", "validation", "test")
_REGION = {
    "train": "train",
    "validation": "train",
    "test": "test",
}  # the side of the hash space each draws from
# Opt-in skills (named explicitly): the single-shape pair and the pixel skills of the toy experiment.
EXTRA_SKILLS: dict[str, Skill] = {**_SHAPE_SKILLS, **PIXEL_SKILLS}
_TEST_SHARE = 4  # one hash bucket in four belongs to test
_MAX_DRAWS = 10_000

__all__ = [
    "EXTRA_SKILLS",
    "SIZE",
    "SKILLS",
    "SPLITS",
    "generate_problems",
    "get_skill",
    "problem_split",
    "skill_summary",
    "to_text_problem",
    "write_dataset",
]


def _canonical(skill: str, params: Params) -> str:
    return json.dumps([skill, params], sort_keys=True, separators=(",", ":"))


def problem_split(skill: str, params: Params) -> str:
    """The split that owns this ``(skill, params)`` draw: a fixed partition of the hash space."""
    digest = hashlib.sha256(_canonical(skill, params).encode()).digest()
    return "test" if int.from_bytes(digest[:8], "big") % _TEST_SHARE == 0 else "train"


def get_skill(name: str) -> Skill:
    """A default skill (``SKILLS``) or an extra one (``EXTRA_SKILLS``), looked up by name."""
    skill = SKILLS.get(name) or EXTRA_SKILLS.get(name)
    if skill is None:
        raise CorlError(f"unknown synthetic skill {name!r}; available: {', '.join([*SKILLS, *EXTRA_SKILLS])}")
    return skill


def _check_skills(skills: Sequence[str] | None) -> list[str]:
    names = list(SKILLS) if skills is None else list(skills)
    unknown = [name for name in names if name not in SKILLS and name not in EXTRA_SKILLS]
    if unknown or not names:
        available = ", ".join([*SKILLS, *EXTRA_SKILLS])
        raise CorlError(f"unknown synthetic skill(s) {unknown or '(none given)'}; available: {available}")
    return names


def _as_png(image: Image.Image) -> Image.Image:
    """Keep the picture PNG-encoded (a few KB instead of 85 KB of pixels) until someone looks at it."""
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return lazy_image(buffer.getvalue(), verify=False)


def generate_problems(
    n: int, *, seed: int, split: str = "train", skills: Sequence[str] | None = None
) -> list[Problem]:
    """``n`` problems of ``split``, cycling through ``skills`` so each gets an equal share.

    ``skills=None`` means the five default skills (``SKILLS``); the extra ones (``EXTRA_SKILLS``:
    ``shape_color``, ``shape_sides`` and the pixel skills ``spot_color``, ``spot_quadrant``, ``spot_size``,
    ``count_blobs``, ``tallest_bar``) must be named, so default datasets stay what they always were.

    Problem ``i`` is drawn from its own RNG seeded by ``(seed, split, i)``, so records are reproducible one
    by one and ``generate_problems(10, ...)`` is a prefix of ``generate_problems(20, ...)``.
    """
    if split not in SPLITS:
        raise CorlError(f"unknown split {split!r}; synthetic data has splits {', '.join(SPLITS)}")
    if n < 0:
        raise CorlError(f"number of problems must be >= 0, got {n}")
    names = _check_skills(skills)
    problems = []
    for i in range(n):
        skill = get_skill(names[i % len(names)])
        rng = random.Random(f"corl-vl-synth:{seed}:{split}:{i}")
        for _ in range(_MAX_DRAWS):
            params = skill.sample(rng)
            if problem_split(skill.name, params) == _REGION[split]:
                break
        else:  # pragma: no cover - each draw is test with odds 1/4: 10k misses cannot happen
            raise CorlError(f"could not draw a {split} problem for skill {skill.name}")
        rendered = skill.render(params)
        problems.append(
            Problem(
                id=f"synth-{split}-{seed}-{i:06d}",
                question=rendered.question,
                images=[_as_png(rendered.image)],
                choices=rendered.choices,
                answer=rendered.answer,
                meta={"skill": skill.name, "params": params, "text_question": rendered.text_question},
            )
        )
    return problems


def to_text_problem(problem: Problem) -> Problem:
    """The text-only rendering of a synthetic problem: same id, answer and options, picture in words.

    It keeps the id, so a text LLM and a VLM in one cohort exchange answers for the same problem.
    """
    text = problem.meta.get("text_question")
    if not text:
        raise CorlError(f"problem {problem.id}: no text rendering (meta['text_question'] is missing)")
    return Problem(
        id=problem.id,
        question=text,
        images=[],
        choices=None if problem.choices is None else list(problem.choices),
        answer=problem.answer,
        meta=dict(problem.meta),
    )


def _features():  # -> datasets.Features; imported lazily so the CLI starts fast
    # lazy: datasets
    from datasets import Features, Image, Json, List, Value

    return Features(
        {
            "id": Value("string"),
            "question": Value("string"),
            "text_question": Value("string"),
            "image": Image(),
            "choices": List(Value("string")),
            "answer": Value("string"),
            "skill": Value("string"),
            "params": Json(),
        }
    )


def write_dataset(
    splits: Mapping[str, Sequence[Problem]], out_dir: str | Path, *, overwrite: bool = False
) -> Path:
    """Save ``{split: problems}`` as a Hugging Face ``DatasetDict`` folder (``save_to_disk``), atomically.

    One self-contained folder with PNGs embedded in Arrow (HF ``Image`` feature) rather than parquet plus
    loose image files: nothing can drift out of sync, it memory-maps, and both ``datasets.load_from_disk``
    and :func:`corl_vl.data.datasets.load_problems` read it. Columns: ``id, question, text_question, image,
    choices, answer, skill, params`` (``params`` as JSON). Written into a temporary sibling folder and
    renamed into place, so a crash never leaves a half-written dataset.
    """
    # lazy: datasets
    from datasets import (
        Dataset,
        DatasetDict,
        disable_progress_bars,
        enable_progress_bars,
        is_progress_bar_enabled,
    )

    out = Path(out_dir)
    if out.exists() and not overwrite:
        raise CorlError(f"{out} already exists (use --overwrite to replace it)")
    features = _features()
    tables = {}
    for split, problems in splits.items():
        for p in problems:
            if len(p.images) != 1 or "text_question" not in p.meta or "params" not in p.meta:
                raise CorlError(
                    f"problem {p.id}: not a synthetic problem (needs one image, params, text_question)"
                )
        columns = {
            "id": [p.id for p in problems],
            "question": [p.question for p in problems],
            "text_question": [p.meta["text_question"] for p in problems],
            "image": [p.images[0] for p in problems],
            "choices": [p.choices for p in problems],
            "answer": [p.answer for p in problems],
            "skill": [p.meta.get("skill") for p in problems],
            "params": [p.meta["params"] for p in problems],
        }
        tables[split] = Dataset.from_dict(columns, features=features)
    bars_on = is_progress_bar_enabled()
    disable_progress_bars()  # the CLI prints its own summary
    try:
        with atomic_dir(out) as tmp:
            # An empty split needs one explicit (empty) shard, or datasets cannot load it back.
            shards = {split: 1 if len(table) == 0 else None for split, table in tables.items()}
            DatasetDict(tables).save_to_disk(str(tmp), num_shards=shards)
    finally:
        if bars_on:
            enable_progress_bars()
    return out


def skill_summary(splits: Mapping[str, Sequence[Problem]]) -> str:
    """A plain-text table: problems per skill and split, answer kind, and one example question."""
    counts = {split: Counter(p.meta.get("skill") for p in problems) for split, problems in splits.items()}
    header = ["skill", "kind", *splits, "example"]
    rows = []
    for name, skill in {**SKILLS, **EXTRA_SKILLS}.items():
        if not any(counts[split][name] for split in splits):
            continue
        example = next(
            p.question for problems in splits.values() for p in problems if p.meta.get("skill") == name
        )
        kind = "multiple-choice" if skill.multiple_choice else "free-form"
        rows.append([name, kind, *(str(counts[split][name]) for split in splits), example])
    rows.append(["total", "", *(str(len(problems)) for problems in splits.values()), ""])
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in [header, *rows]
    )
