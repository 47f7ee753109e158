"""The paper's training data by name: ``data.train: mmr1-math | open-r1-8k | math-l3-5``.

A :class:`Recipe` pins what a name means — hub id, split, column layout and row filter — so a config says
``mmr1-math`` instead of a path the user does not have. Loading a recipe reads the hub (or its cache);
:func:`prepare` writes the same rows into a local folder that ``data.train`` accepts, for clusters whose
compute nodes have no internet (``corl-vl data prepare NAME --out DIR`` on a login node).

The table in docs/data.md lists each recipe's rows, fields and license.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from corl_vl.data.hub import load_rows
from corl_vl.data.layouts import MATH, MMR1, OPEN_R1, Layout
from corl_vl.errors import CorlError
from corl_vl.io import atomic_dir

log = logging.getLogger("corl_vl")

__all__ = [
    "RECIPES",
    "Recipe",
    "get_recipe",
    "load_recipe_rows",
    "prepare",
    "split_recipe_name",
]


@dataclass(frozen=True)
class Recipe:
    """A named training set.

    Attributes:
        name: what ``data.train`` says.
        hub_id: the hub dataset it reads.
        split: the split used by default (``NAME@split`` picks another).
        layout: its column layout (which column is the question, answer, image).
        modality: ``vision`` (problems with images) or ``text``.
        license: as stated by the dataset's card or source.
        keep: row filter applied after normalising (None keeps every row).
        keep_description: the filter in words (printed by ``data prepare``).
    """

    name: str
    hub_id: str
    split: str
    layout: Layout
    modality: str
    license: str
    keep: Callable[[dict[str, Any]], bool] | None = None
    keep_description: str = "all rows"


def _math_level_3_to_5(row: dict[str, Any]) -> bool:
    return str(row.get("level", "")).strip() in ("Level 3", "Level 4", "Level 5")


RECIPES: dict[str, Recipe] = {
    r.name: r
    for r in (
        Recipe("mmr1-math", "MMR1/MMR1-Math-RL-Data-v0", "train", MMR1, "vision", "not stated on the card"),
        Recipe(
            "open-r1-8k",
            "lmms-lab/multimodal-open-r1-8k-verified",
            "train",
            OPEN_R1,
            "vision",
            "not stated on the card",
        ),
        Recipe(
            "math-l3-5",
            "DigitalLearningGmbH/MATH-lighteval",
            "train",
            MATH,
            "text",
            "MIT",
            keep=_math_level_3_to_5,
            keep_description="levels 3-5",
        ),
    )
}

# What `corl-vl train --pair` trains on when no data.train is given: the paper's data for each modality.
DEFAULT_RECIPE = {"vision": "mmr1-math", "text": "math-l3-5"}


def split_recipe_name(text: str) -> tuple[str, str | None]:
    """``"mmr1-math@validation"`` → ``("mmr1-math", "validation")``."""
    name, _, split = text.partition("@")
    return name, (split or None)


def get_recipe(name: str) -> Recipe:
    """The recipe called ``name``; an unknown name is one line listing the recipes."""
    try:
        return RECIPES[name]
    except KeyError:
        raise CorlError(f"unknown data recipe '{name}'; recipes: {', '.join(RECIPES)}") from None


def load_recipe_rows(
    recipe: Recipe,
    *,
    split: str | None = None,
    limit: int | None = None,
    source: str | Path | None = None,
    preparing: bool = False,
) -> tuple[str, list[str], list[dict[str, Any]]]:
    """(label, columns, rows) of a recipe: read, normalised to ``id, question, answer, images``, filtered.

    Args:
        recipe: which recipe.
        split: another split than the recipe's.
        limit: keep the first ``limit`` rows *after* filtering.
        source: read a local copy of the hub repository (same layout) instead of the hub.
        preparing: called by :func:`prepare` (changes only the offline message).
    """
    split = split or recipe.split
    label = f"{recipe.name} ({source or recipe.hub_id} [{split}])"
    columns, rows = load_rows(
        source or recipe.hub_id, split=split, label=label, recipe=recipe.name, preparing=preparing
    )
    missing = sorted(recipe.layout.signature - set(columns))
    if missing:
        raise CorlError(
            f"{label}: not the {recipe.layout.name} layout (missing columns {', '.join(missing)}; "
            f"columns: {', '.join(columns)})"
        )
    rows = recipe.layout.normalize(rows)
    if recipe.keep is not None:
        rows = [row for row in rows if recipe.keep(row)]
    if recipe.layout.answer_step is not None:  # the answer sits in a solution: a row without one is left out
        kept = [row for row in rows if row.get("answer") is not None]
        if len(kept) < len(rows):
            where = {"boxed": "a \\boxed{} answer", "answer_tag": "an <answer> tag"}[
                recipe.layout.answer_step
            ]
            log.warning(
                "%s: left out %d of %d rows whose %s has no %s (an answer is never guessed from the text)",
                label,
                len(rows) - len(kept),
                len(rows),
                recipe.layout.answer,
                where,
            )
        rows = kept
    if limit is not None:
        rows = rows[:limit]
    columns = list(dict.fromkeys(key for row in rows for key in row)) if rows else ["id", "question"]
    return label, columns, rows


def _image_list(value: Any) -> list[dict[str, Any]]:
    """Encoded images of one row as a list of ``{"bytes", "path"}`` (the HF ``Image`` storage)."""
    if value is None:
        return []
    items = value if isinstance(value, list | tuple) else [value]
    return [
        item if isinstance(item, dict) else {"bytes": item, "path": None}
        for item in items
        if item is not None
    ]


def prepare(
    name: str,
    out: str | Path,
    *,
    source: str | Path | None = None,
    limit: int | None = None,
    overwrite: bool = False,
) -> tuple[Path, int]:
    """Write recipe ``name`` (``NAME[@split]``) as a ``save_to_disk`` folder with one split; (folder, rows).

    The folder has the default columns ``id, question, answer, images`` (plus the source's other columns), so
    ``data.train: OUT`` loads it with no field map, and a ``recipe.json`` saying where it came from.
    """
    # lazy: datasets
    from datasets import Dataset, DatasetDict, Image, List

    base, split = split_recipe_name(name)
    recipe = get_recipe(base)
    out = Path(out)
    if out.exists() and not overwrite:
        raise CorlError(f"{out} already exists (use --overwrite to replace it)")
    label, _, rows = load_recipe_rows(recipe, split=split, limit=limit, source=source, preparing=True)
    if not rows:
        raise CorlError(f"{label}: no rows left after the filter ({recipe.keep_description})")
    images = recipe.layout.images is not None
    for row in rows:
        if images:
            row["images"] = _image_list(row.get("images"))
    data = Dataset.from_list(rows)
    if images:
        data = data.cast_column("images", List(Image()))
    provenance = {
        "recipe": recipe.name,
        "hub_id": recipe.hub_id,
        "split": split or recipe.split,
        "source": str(source) if source else recipe.hub_id,
        "filter": recipe.keep_description,
        "rows": len(rows),
        "license": recipe.license,
    }
    with atomic_dir(out) as tmp:
        DatasetDict({split or recipe.split: data}).save_to_disk(str(tmp))
        (tmp / "recipe.json").write_text(json.dumps(provenance, indent=2) + "\n")
    return out, len(rows)
