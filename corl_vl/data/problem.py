"""The one record type every part of corl-vl speaks: a problem with an id.

Co-RL exchanges answers *keyed by problem id*, so every problem carries a stable string id from its source
(benchmark ``pid``, dataset row id, synthetic id). Images are kept as PIL images or as paths that are opened
lazily by the adapter (so a dataset of 10k problems does not hold 10k decoded images).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Union

if TYPE_CHECKING:
    import PIL.Image

# a forward reference: this module (every problem) must import without Pillow, e.g. for `corl-vl --help`
ImageLike = Union["PIL.Image.Image", str, Path]


@dataclass
class Problem:
    """One question for a model.

    Attributes:
        id: stable identifier; answers travel between agents keyed by it.
        question: the text shown to the model (without the answer-format instruction; adapters add that).
        images: zero or more images (PIL images or file paths).
        choices: option texts for multiple choice, in order (letters A, B, ... are implied), else None.
        answer: the gold answer when known (evaluation, GT-reward baseline, monitoring); never used by Co-RL.
        meta: anything else from the source row (skill, benchmark fields) carried through to outputs.
    """

    id: str
    question: str
    images: list[ImageLike] = field(default_factory=list)
    choices: list[str] | None = None
    answer: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)
