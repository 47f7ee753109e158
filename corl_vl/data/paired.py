"""Paired views: one agent trains on the original questions, another on answer-preserving rewrites.

The public release pairs rows by position and never checks, so a shuffled or truncated rephrase file would
silently give each agent a different problem under the same label and poison every pseudo-label. Here a
paired view must match the original id for id, row for row, with equal answers wherever both have one; the
first mismatch stops the run with one line naming the row and id.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from corl_vl.answers.options import letter_of, parse_options
from corl_vl.data.datasets import FieldMap, load_problems
from corl_vl.data.problem import Problem
from corl_vl.errors import CorlError

__all__ = ["answer_in_base_options", "load_paired_view", "verify_paired_views"]


def _option_key(text: str) -> str:
    return " ".join(text.split()).casefold()


def answer_in_base_options(
    answer: str | None, view_choices: Sequence[str] | None, base_choices: Sequence[str] | None
) -> str | None:
    """An answer read against an agent's view of the options, restated against the base problem's options.

    Why: votes and rewards compare answers under the *base* options, but each agent picks a letter of *its*
    view's options; a view that reorders them would turn its "D" into the base's D. A letter is mapped through
    its option text: to the base letter with the same text, else to the text itself (a reworded option is then
    compared by value). Answers that are not option letters pass through unchanged.
    """
    if answer is None or not view_choices or not base_choices or list(view_choices) == list(base_choices):
        return answer

    view, base = parse_options(view_choices), parse_options(base_choices)
    letter = letter_of(answer, view)
    if letter is None:
        return answer
    value = view.values[view.letters.index(letter)]
    keys = [_option_key(v) for v in base.values]
    key = _option_key(value)
    return base.letters[keys.index(key)] if key in keys else value


def verify_paired_views(original: Sequence[Problem], rephrased: Sequence[Problem], *, source: str) -> None:
    """Check that ``rephrased`` (read from ``source``) is aligned with ``original``.

    Same count; at every row the same id (so a shuffled file is rejected even when its ids are right: a
    reorder is how misalignment usually starts); the same answer when both rows have one (compared as
    stripped strings — a rephrase keeps the original answer verbatim); the same number of options when
    both are multiple choice. Raises :class:`CorlError` naming the first offending row and id.
    """
    if len(rephrased) != len(original):
        raise CorlError(f"{source}: {len(rephrased)} problems, but the original view has {len(original)}")
    original_ids = {p.id for p in original}
    if len(original_ids) != len(original):
        raise CorlError(f"{source}: the original view has duplicate ids; cannot pair by id")
    for row, (orig, reph) in enumerate(zip(original, rephrased)):
        if reph.id != orig.id:
            why = "rows are shuffled" if reph.id in original_ids else "id not in the original"
            raise CorlError(f"{source} row {row}: id {reph.id!r} where the original has {orig.id!r} ({why})")
        if orig.answer is not None and reph.answer is not None and orig.answer.strip() != reph.answer.strip():
            raise CorlError(
                f"{source} row {row} (id {orig.id!r}): answer {reph.answer!r} differs from the original {orig.answer!r}"
            )
        if orig.choices is not None and reph.choices is not None and len(orig.choices) != len(reph.choices):
            raise CorlError(
                f"{source} row {row} (id {orig.id!r}): {len(reph.choices)} options, the original has "
                f"{len(orig.choices)}"
            )


def load_paired_view(
    original: Sequence[Problem],
    path: str | Path,
    *,
    split: str | None = None,
    fields: FieldMap | None = None,
    image_root: Path | None = None,
    limit: int | None = None,
) -> list[Problem]:
    """Load the rephrased view at ``path``, verify it against ``original``, and complete it from the original.

    A rephrase usually rewrites only the question text, so a rephrased row without images, options or answer
    takes them from its original (a VLM on the rephrased view still needs the picture); ``meta`` is the
    original's updated with the rephrased row's. Pass the same ``limit`` used to load ``original``. The
    result is in the original's order, one problem per original id.
    """
    rephrased = load_problems(path, split=split, fields=fields, image_root=image_root, limit=limit)
    verify_paired_views(original, rephrased, source=str(path))
    return [
        Problem(
            id=orig.id,
            question=reph.question,
            images=list(reph.images or orig.images),
            choices=reph.choices if reph.choices is not None else orig.choices,
            answer=reph.answer if reph.answer is not None else orig.answer,
            meta={**orig.meta, **reph.meta},
        )
        for orig, reph in zip(original, rephrased)
    ]
